"""The rules for a model name: it becomes a C++ namespace, the stem of NAME.hpp and
NAME_abi.cpp, and part of the include guard, so it must compile and must not collide.

Every place that checks a model name or a file stem calls ``check_identifier`` (or
``sanitize_identifier`` to derive one from a file stem), so the rules live only here."""
from __future__ import annotations

import re

from .errors import CompilerError
from .std_macros import MACROS

MAX_LENGTH = 64   # keeps NAME_abi.cpp and its temporaries far below any file-name limit

CPP_KEYWORDS = frozenset("""alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t
char16_t char32_t class compl concept const consteval constexpr constinit const_cast continue co_await co_return
co_yield decltype default delete do double dynamic_cast else enum explicit export extern false float for friend
goto if inline int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected
public register reinterpret_cast requires return short signed sizeof static static_assert static_cast struct
switch template this thread_local throw true try typedef typeid typename union unsigned using virtual void
volatile wchar_t while xor xor_eq""".split())
C_KEYWORDS = frozenset("restrict typeof typeof_unqual".split())   # C-only; _Bool etc. are reserved anyway
# Names the header itself uses unqualified around the model's namespace.
HEADER_NAMES = frozenset({"std", "detail"})
# Names a C or C++ program reserves at global scope: the entry point.
PROGRAM_NAMES = frozenset({"main"})
# The extern "C" shim's own symbols (compiler/emit_abi.py): all of them start with cbf_, and the
# firmware's generated cbf_config / cbf_system namespaces too, so the whole prefix is refused.
SHIM_PREFIX = "cbf_"

_INT_MACROS = [f"{p}{w}_{s}" for w in (8, 16, 32, 64)
               for p, ss in (("INT", ("MIN", "MAX")), ("UINT", ("MAX",)), ("INT_LEAST", ("MIN", "MAX")),
                             ("UINT_LEAST", ("MAX",)), ("INT_FAST", ("MIN", "MAX")), ("UINT_FAST", ("MAX",)))
               for s in ss] + [f"{p}{w}_C" for w in (8, 16, 32, 64) for p in ("INT", "UINT")]
# Macros of the C/C++/POSIX headers a program may include next to the generated header: the
# names written out here, and every one the compilers' headers define (``std_macros``: M_PI,
# EINVAL, SIGINT, PRId64, CLOCK_REALTIME, linux, ... harvested once and frozen).
STANDARD_MACROS = MACROS | frozenset(_INT_MACROS + """NULL offsetof SIZE_MAX PTRDIFF_MIN PTRDIFF_MAX INTPTR_MIN INTPTR_MAX
UINTPTR_MAX INTMAX_MIN INTMAX_MAX UINTMAX_MAX INTMAX_C UINTMAX_C SIG_ATOMIC_MIN SIG_ATOMIC_MAX WCHAR_MIN WCHAR_MAX
WINT_MIN WINT_MAX CHAR_BIT CHAR_MIN CHAR_MAX SCHAR_MIN SCHAR_MAX UCHAR_MAX SHRT_MIN SHRT_MAX USHRT_MAX INT_MIN
INT_MAX UINT_MAX LONG_MIN LONG_MAX ULONG_MAX LLONG_MIN LLONG_MAX ULLONG_MAX MB_LEN_MAX FLT_MAX FLT_MIN FLT_EPSILON
FLT_DIG FLT_MANT_DIG DBL_MAX DBL_MIN DBL_EPSILON DBL_DIG DBL_MANT_DIG LDBL_MAX LDBL_MIN LDBL_EPSILON FLT_RADIX
EOF BUFSIZ FILENAME_MAX FOPEN_MAX L_tmpnam SEEK_CUR SEEK_END SEEK_SET TMP_MAX stdin stdout stderr assert errno
EDOM ERANGE EILSEQ HUGE_VAL HUGE_VALF HUGE_VALL INFINITY NAN FP_NAN FP_INFINITE FP_ZERO FP_NORMAL FP_SUBNORMAL
MATH_ERRNO MATH_ERREXCEPT math_errhandling EXIT_SUCCESS EXIT_FAILURE RAND_MAX MB_CUR_MAX CLOCKS_PER_SEC
setjmp va_arg va_start va_end va_copy isnan isinf isfinite signbit fpclassify""".split())
# Types <cstddef>/<cstdint> put in the global namespace.
GLOBAL_TYPEDEFS = frozenset([f"{p}int{w}_t" for w in (8, 16, 32, 64) for p in ("", "u")]
                            + [f"{p}int_{k}{w}_t" for w in (8, 16, 32, 64) for p in ("", "u")
                               for k in ("least", "fast")]
                            + "size_t ptrdiff_t max_align_t nullptr_t intptr_t uintptr_t intmax_t uintmax_t "
                              "wint_t wctype_t mbstate_t FILE fpos_t div_t ldiv_t lldiv_t".split())


class IdentifierError(CompilerError, ValueError):
    """A model name that cannot be a C++ namespace and file stem (the message says why)."""


def identifier_problem(name: str) -> str | None:
    """Why ``name`` cannot be a model name, or None if it can."""
    if not isinstance(name, str) or not name:
        return "it is empty"
    if len(name) > MAX_LENGTH:
        return f"it has {len(name)} characters, more than {MAX_LENGTH}"
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
        return "use letters, digits and underscores, starting with a letter"
    if "__" in name:
        return "a double underscore is reserved to the implementation"
    if name in CPP_KEYWORDS or name in C_KEYWORDS:
        return "it is a C or C++ keyword"
    if name in HEADER_NAMES:
        return "the generated header uses this name itself"
    if name.startswith(SHIM_PREFIX):
        return f"the {SHIM_PREFIX}* names belong to the generated C shim and firmware"
    if name in PROGRAM_NAMES:
        return "it is the program's entry point, which no namespace may be named"
    if name in STANDARD_MACROS:
        return "it is a macro of the standard C, C++ or POSIX headers (e.g. <cmath>, <cerrno>, <csignal>)"
    if name in GLOBAL_TYPEDEFS:
        return "it is a standard global type name"
    return None


def check_identifier(name: str) -> str:
    """``name`` if it is usable as the model's namespace and file stem; else IdentifierError."""
    problem = identifier_problem(name)
    if problem:
        raise IdentifierError(f"model name {name!r} is not a valid C++ identifier: {problem}")
    return name


def sanitize_identifier(text: str) -> str:
    """Turn a file stem or label into a valid identifier (used when no name is given)."""
    name = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", text)).strip("_") or "model"
    if not name[0].isalpha():
        name = "m_" + name
    name = name[:MAX_LENGTH - len("_model")].rstrip("_")
    if identifier_problem(name):
        name = "m_" + name if name.startswith(SHIM_PREFIX) else name + "_model"
    return name


def include_guard(name: str, prefix: str = "CBFSIM_") -> str:
    """An include guard that differs for every valid name. Names without capitals keep the plain
    CBFSIM_<NAME>_HPP (so existing headers are unchanged); a name with capitals adds a lowercase
    'u' and the hex mask of its capital positions, so 'Foo' and 'FOO' get different guards and
    neither can equal the (all-capital) guard of a lowercase name."""
    mask = sum(1 << i for i, ch in enumerate(name) if ch.isupper())
    return f"{prefix}{name.upper()}_HPP" if not mask else f"{prefix}{name.upper()}_u{mask:x}_HPP"
