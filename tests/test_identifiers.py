"""compiler/identifiers.py: model names that cannot compile or would collide are refused up
front, include guards differ for every name, and NAME.hpp / NAME_abi.cpp appear together or not at all."""
from __future__ import annotations

import subprocess
from dataclasses import replace

import pytest

from compiler.api import compile_model
from compiler.identifiers import MAX_LENGTH, IdentifierError, check_identifier, include_guard, sanitize_identifier
from training.architectures import mlp

REFUSED = {
    "keyword": ["namespace", "restrict", "char8_t"],
    "shim symbol": ["cbf_lie", "cbf_dims", "cbf_abi_version", "cbf_lie2_batch", "cbf_config"],
    "macro": ["NULL", "SIZE_MAX", "INT8_MAX", "UINT64_C", "EOF", "assert", "errno", "INFINITY"],
    "header macro": ["M_PI", "EINVAL", "SIGINT", "PRId64", "CLOCK_REALTIME", "ENOMEM", "SIG_IGN", "FE_DIVBYZERO",
                     "O_RDONLY", "PTHREAD_MUTEX_INITIALIZER", "linux", "unix", "isnan", "quad"],
    "entry point": ["main"],
    "typedef": ["size_t", "int8_t", "uint_fast16_t", "ptrdiff_t", "intptr_t", "max_align_t"],
    "reserved": ["_Foo", "_x", "double__underscore", "a__"],
    "length": ["a" * (MAX_LENGTH + 1), "b" * 235],
}


@pytest.mark.parametrize("name", [n for names in REFUSED.values() for n in names])
def test_names_that_cannot_compile_or_would_collide_are_refused_with_one_line(name):
    with pytest.raises(IdentifierError, match="not a valid C\\+\\+ identifier: ") as info:
        compile_model(mlp([2, 3, 1], seed=0), inputs=1, name=name)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("stem", ["size_t", "NULL", "cbf_lie", "int8_t", "namespace", "x" * 200])
def test_file_stems_are_turned_into_accepted_names(stem):
    check_identifier(sanitize_identifier(stem))


def test_longest_accepted_name_is_accepted():
    assert check_identifier("a" * MAX_LENGTH)


@pytest.mark.toolchain
@pytest.mark.parametrize("name", ["size_t", "NULL", "INT8_MAX", "cbf_lie", "cbf_dims", "cbf_abi_version", "EOF",
                                  "errno", "ptrdiff_t", "int8_t", "M_PI", "EINVAL", "SIGINT", "PRId64",
                                  "CLOCK_REALTIME", "main"])
def test_each_refused_class_really_fails_to_compile_when_let_through(name, cxx, tmp_path, monkeypatch):
    """The refusals are not arbitrary: with the check bypassed, g++ rejects the shim. (Function-like
    macros such as assert only break a use followed by '(', and are refused as a precaution.)"""
    import compiler.emit_abi as emit_abi
    import compiler.emit_cpp as emit_cpp
    monkeypatch.setattr(emit_cpp, "check_identifier", lambda n: n)
    monkeypatch.setattr(emit_abi, "check_identifier", lambda n: n)
    monkeypatch.setattr("compiler.api.check_identifier", lambda n: n)
    src = compile_model(mlp([2, 3, 1], seed=0), inputs=1, name=name)
    (tmp_path / f"{name}.hpp").write_text(src.header)
    (tmp_path / "tu.cpp").write_text("#include <cassert>\n#include <cerrno>\n#include <climits>\n#include <cstdint>\n"
                                     "#include <cstdio>\n#include <cmath>\n#include <csignal>\n#include <cinttypes>\n"
                                     "#include <ctime>\n" + src.abi + "\nint main() { return 0; }\n")
    result = subprocess.run([cxx, "-std=c++17", "-fsyntax-only", "-I", str(tmp_path), str(tmp_path / "tu.cpp")],
                            capture_output=True, text=True)
    assert result.returncode != 0


def test_include_guards_differ_for_names_that_differ_only_in_case():
    names = ["foo", "Foo", "FOO", "fOO", "foO", "f_o", "F_O", "foo_u1", "FOO_U1"]
    guards = [include_guard(n) for n in names]
    assert len(set(guards)) == len(names)
    assert include_guard("vdp") == "CBFSIM_VDP_HPP"   # names without capitals keep their guard


@pytest.mark.toolchain
def test_headers_named_foo_and_FOO_can_be_included_together(cxx, tmp_path):
    net = mlp([2, 3, 1], seed=0)
    for name in ("Foo", "FOO"):
        compile_model(net, inputs=1, name=name).write(tmp_path)
    (tmp_path / "main.cpp").write_text(
        '#include "Foo.hpp"\n#include "FOO.hpp"\n'
        "int main() { float x[2] = {0.1f, 0.2f}, f[2] = {1, 0}, G[2] = {0, 1}, o[3], p[3];\n"
        "  return Foo::lie(x, f, G, o) + FOO::lie(x, f, G, p); }\n")
    result = subprocess.run([cxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I", str(tmp_path),
                             str(tmp_path / "main.cpp")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_a_235_character_name_leaves_no_files(tmp_path):
    with pytest.raises(IdentifierError):
        compile_model(mlp([2, 3, 1], seed=0), inputs=1, name="n" * 235).write(tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("length", [235, 250])
def test_a_failed_write_of_one_file_leaves_neither(tmp_path, length):
    """235: the temporaries' names used to exceed the file-name limit; 250: NAME.hpp fits (254
    bytes) but NAME_abi.cpp does not, so the second rename fails after the first succeeded."""
    src = compile_model(mlp([2, 3, 1], seed=0), inputs=1, name="ok")
    long = replace(src, name="n" * length, abi=src.abi.replace("ok.hpp", "n" * length + ".hpp"))
    try:
        long.write(tmp_path)
    except OSError:
        pass
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files in ([], sorted([f"{long.name}.hpp", f"{long.name}_abi.cpp"]))
    if length == 250:
        assert files == []


@pytest.mark.parametrize("tool", ["g++", "arm-none-eabi-gcc"])
def test_the_frozen_macro_list_covers_every_macro_the_installed_headers_define(tool):
    """Harvested again from the compiler's headers (-E -dM), as std_macros was made: every name
    a model could take that is a macro there is in the frozen list, and refused."""
    import shutil
    from compiler.identifiers import identifier_problem
    from compiler.std_macros import HARVESTS, MACROS, harvest
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} not installed")
    _, language, headers, dialects = next(h for h in HARVESTS if h[0] == tool)
    found = harvest(tool, language, headers, dialects)
    assert {"M_PI", "EINVAL", "SIGINT", "PRId64", "CLOCK_REALTIME"} <= found or tool != "g++"
    assert sorted(found - MACROS) == []
    assert all(identifier_problem(name) for name in found)
