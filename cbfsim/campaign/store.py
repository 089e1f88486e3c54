"""A campaign owns its folder: an exclusive lock, a spec-hash stamp, and shard files that carry
their spec hash, setting, shard index and a sha256 of their payload.

    OUT/campaign.lock   flock()ed by the running campaign, holding its pid (emptied on exit; a
                        lock left by a killed campaign is taken over with a message)
    OUT/campaign.json   {"format", "spec_hash"}: the campaign this folder holds
    OUT/spec.json       the checked spec (for people; the stamp is what is compared)
    OUT/shards/sSSSS-kKKKKK.json   {"format", "sha256", "payload"} (payload: shards.run_shard)

Reading a shard tells two failures apart. A damaged shard (truncated, not JSON, checksum
wrong) is named in a warning, set aside as ``NAME.damaged`` and run again. A foreign one (a
JSON list, another format, another spec hash, a setting or index that is not its file name's,
runs or seeds that are not the spec's) is refused with one line naming the file: it was
written by something else, and merging it would make a wrong claim. (A checksum detects
damage, not intent: a forger who recomputes it and keeps every field consistent with the spec
is beyond what a file can prove.)
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from compiler.errors import CbfsimError
from compiler.publish import atomic_write

from ..fate import FATES
from .spec import Spec, SpecError

log = logging.getLogger("cbfsim.campaign")
SHARD_FORMAT = "cbfsim-campaign-shard/2"
STAMP_FORMAT = "cbfsim-campaign/2"
LOCK, STAMP = "campaign.lock", "campaign.json"
_NAME = re.compile(r"s(\d{4,})-k(\d{5,})\.json")
PER_RUN = ("seeds", "fate", "step", "min_constraint", "min_h", "max_slack")


class CampaignBusyError(CbfsimError, RuntimeError):
    """Another campaign holds the folder."""


class ForeignShardError(CbfsimError, ValueError):
    """A shard file this campaign did not write (one line naming the file)."""


class DamagedShardError(CbfsimError, ValueError):
    """A shard file that cannot be read whole (truncated, not JSON, wrong checksum)."""


def shard_path(out: Path, setting: int, shard: int) -> Path:
    return out / "shards" / f"s{setting:04d}-k{shard:05d}.json"


def _canonical(payload: Any) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


def envelope(payload: dict) -> dict:
    """The shard as written: the payload and the sha256 of its canonical JSON."""
    return {"format": SHARD_FORMAT, "sha256": hashlib.sha256(_canonical(payload)).hexdigest(), "payload": payload}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def owned(out: Path) -> Iterator[None]:
    """Hold OUT exclusively while the body runs (flock on OUT/campaign.lock, our pid inside)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise CampaignBusyError(f"{out} is in use by another campaign (pid {holder}); wait for it to finish "
                                    f"or choose another --out") from None
        previous = os.pread(fd, 32, 0).decode(errors="replace").strip()
        if previous.isdigit() and int(previous) != os.getpid():
            state = "no longer running" if not _alive(int(previous)) else "running, but no longer holding it"
            log.warning(f"{path}: taking over the lock of campaign pid {previous} ({state})")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def claim(spec: Spec, out: Path) -> None:
    """Stamp OUT with the spec hash, or check that the campaign there is this one (under the lock)."""
    (out / "shards").mkdir(exist_ok=True)
    stamp = out / STAMP
    if stamp.exists():
        try:
            held = json.loads(stamp.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise SpecError(f"{stamp} is damaged; remove {out} or choose another --out") from None
        if not isinstance(held, dict) or held.get("format") != STAMP_FORMAT:
            raise SpecError(f"{stamp} is not a cbfsim campaign stamp; choose another --out")
        if held.get("spec_hash") != spec.spec_hash:
            raise SpecError(f"{out} holds a different campaign (spec hash {str(held.get('spec_hash'))[:12]}, this "
                            f"spec {spec.spec_hash[:12]}); choose another --out")
    elif (out / "spec.json").exists() or any((out / "shards").iterdir()):
        raise SpecError(f"{out} holds a campaign without a spec-hash stamp (an older cbfsim?); choose another --out")
    else:
        atomic_write(stamp, json.dumps({"format": STAMP_FORMAT, "spec_hash": spec.spec_hash}, indent=2) + "\n")
    atomic_write(out / "spec.json", json.dumps(spec.source, indent=2, sort_keys=True) + "\n")


def verify(spec: Spec, data: Any, name: str, setting: int | None = None, shard: int | None = None) -> dict:
    """The payload of a shard read from ``name``, checked whole and against this campaign."""
    from .shards import run_seeds, shard_range
    if not isinstance(data, dict):
        raise ForeignShardError(f"{name} holds a JSON {type(data).__name__.replace('dict', 'object')}, "
                                f"not a campaign shard; refused")
    if data.get("format") != SHARD_FORMAT or set(data) != {"format", "sha256", "payload"}:
        raise ForeignShardError(f"{name} is not a {SHARD_FORMAT} file; refused")
    payload = data["payload"]
    if not isinstance(payload, dict) or hashlib.sha256(_canonical(payload)).hexdigest() != data["sha256"]:
        raise DamagedShardError(f"{name}: checksum does not match its payload")

    def foreign(why: str) -> ForeignShardError:
        return ForeignShardError(f"{name} {why}; refused (remove it, or choose another --out)")
    if payload.get("spec_hash") != spec.spec_hash:
        raise foreign(f"was written by another campaign (spec hash {str(payload.get('spec_hash'))[:12]}, "
                      f"this campaign {spec.spec_hash[:12]})")
    s, k = payload.get("setting"), payload.get("shard")
    if type(s) is not int or type(k) is not int or not 0 <= s < len(spec.settings) \
            or not 0 <= k < spec.shards_per_setting or (setting is not None and (s, k) != (setting, shard)):
        raise foreign(f"claims setting {s!r}, shard {k!r}" + (f", not its name's {setting}, {shard}"
                                                            if setting is not None else ""))
    lo, hi = shard_range(spec, k)
    if payload.get("runs") != [lo, hi]:
        raise foreign(f"holds runs {payload.get('runs')!r}, not shard {k}'s [{lo}, {hi}]")
    for key in PER_RUN:
        if not isinstance(payload.get(key), list) or len(payload[key]) != hi - lo:
            raise foreign(f"has no {hi - lo} entries of {key!r}")
    if payload["seeds"] != [int(v) for v in run_seeds(spec.seed, s, np.arange(lo, hi))]:
        raise foreign("holds run seeds that are not this campaign's")
    if not set(payload["fate"]) <= set(FATES):
        raise foreign(f"holds a fate outside {', '.join(FATES)}")
    return payload


def read(spec: Spec, path: Path) -> dict:
    """The verified payload of one shard file (DamagedShardError, ForeignShardError)."""
    match = _NAME.fullmatch(path.name)
    if match is None:
        raise ForeignShardError(f"{path} is not named like a campaign shard (sSSSS-kKKKKK.json); refused")
    try:
        data = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise DamagedShardError(f"{path} is not valid JSON ({type(exc).__name__}: {exc})"[:300]) from None
    return verify(spec, data, str(path), int(match.group(1)), int(match.group(2)))


def scan(spec: Spec, out: Path, set_aside: bool = False) -> dict[tuple[int, int], Path]:
    """The good shards on disk by (setting, shard); a foreign one stops the campaign. A damaged
    one is left out (to be run again); with ``set_aside`` (the campaign holding the lock) it is
    named in a warning and renamed NAME.damaged."""
    good = {}
    for path in sorted((out / "shards").glob("s*-k*.json")):
        try:
            payload = read(spec, path)
        except DamagedShardError as exc:
            if set_aside:
                aside = path.with_name(path.name + ".damaged")
                os.replace(path, aside)
                log.warning(f"damaged shard: {exc}; set aside as {aside.name} and run again")
            continue
        good[(payload["setting"], payload["shard"])] = path
    return good


def save(spec: Spec, out: Path, result: dict) -> None:
    """Check a shard a worker returned, then publish it atomically."""
    payload = verify(spec, result, "a shard returned by a worker")
    atomic_write(shard_path(out, payload["setting"], payload["shard"]), json.dumps(result) + "\n")
