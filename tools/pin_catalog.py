"""Pin the catalog's files to the Hub's current commit (issue 41), and say
what changed.

For every entry of ``resources/models/catalog.json`` (or those named with
``--only``) it asks the Hub's API for the repository at ``main`` with each
file's metadata (``HfApi.model_info(files_metadata=True)``: the commit
``sha``, each file's LFS ``sha256`` and ``size``), writes them as the
entry's ``pins`` and its ``provenance`` (the API address read, the day,
how), and prints one line per file: pinned, unchanged, or what changed.
Nothing else in the file changes. A file the Hub does not list, or lists
without an LFS sha256, is left as it was and said; the exit status is then 1.

Needs the network (or ``--endpoint``, a mirror or the tests' stand-in Hub);
``HF_ENDPOINT`` and ``HF_TOKEN`` work as in every Hub tool. Review the diff
before committing it: a changed sha256 is a re-upload, and the catalog's
other figures (size, context, tools) may need a look too.

    .venv/bin/python -m tools.pin_catalog [--only ID ...] [--dry-run]
        [--catalog PATH] [--endpoint URL] [--today YYYY-MM-DD]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

from app.library import names

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "resources" / "models" / "catalog.json"
HOW = (
    "tools/pin_catalog.py: huggingface_hub HfApi.model_info(repo, "
    "files_metadata=True): the commit sha, each file's LFS sha256 and size"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--catalog", type=Path, default=CATALOG)
    parser.add_argument("--endpoint", help="the Hub's address (default: HF_ENDPOINT)")
    parser.add_argument("--only", nargs="+", metavar="ID", help="these entries only")
    parser.add_argument("--dry-run", action="store_true", help="print, write nothing")
    parser.add_argument(
        "--today", default=datetime.date.today().isoformat(), help="the check's date"
    )
    args = parser.parse_args(argv)

    from huggingface_hub import HfApi, constants

    endpoint = (args.endpoint or constants.ENDPOINT).rstrip("/")
    api = HfApi(endpoint=endpoint)
    data = json.loads(args.catalog.read_text(encoding="utf-8"))
    failed = False
    for entry in data["models"]:
        if args.only and entry["id"] not in args.only:
            continue
        info = api.model_info(entry["repo"], files_metadata=True)
        found = {s.rfilename: s for s in info.siblings or []}
        pins = dict(entry.get("pins") or {})
        for part in names.split_siblings(entry["file"]):
            sibling = found.get(part)
            lfs = sibling.lfs if sibling is not None else None
            if lfs is None or info.sha is None:
                print(f"{entry['id']} {part}: not pinned (the Hub lists no LFS file)")
                failed = True
                continue
            pin = {"revision": info.sha, "sha256": lfs.sha256, "size": lfs.size}
            print(f"{entry['id']} {part}: {_change(pins.get(part), pin)}")
            pins[part] = pin
        if pins != (entry.get("pins") or {}):
            entry["pins"] = pins
            entry["provenance"] = _provenance(endpoint, entry["repo"], info.sha, args)
    if not args.dry_run:
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        args.catalog.write_text(text, encoding="utf-8")
    return 1 if failed else 0


def _change(old: dict[str, Any] | None, new: dict[str, Any]) -> str:
    """One line: what the new pin changes of the old one."""
    if old is None:
        return (
            f"pinned at {new['revision'][:12]} (sha256 {new['sha256'][:12]}…, "
            f"{new['size']:,} bytes)"
        )
    changed = [
        f"{key} {old.get(key)} -> {new[key]}"
        for key in ("revision", "sha256", "size")
        if old.get(key) != new[key]
    ]
    return "changed: " + "; ".join(changed) if changed else "unchanged"


def _provenance(
    endpoint: str, repo: str, commit: str | None, args: argparse.Namespace
) -> dict[str, Any]:
    return {
        "checked": (
            "the files' revision, sha256 and exact size (pinned); the entry's "
            "other figures as written before"
        ),
        "source": f"{endpoint}/api/models/{repo}/revision/{commit}?blobs=true",
        "on": args.today,
        "how": HOW,
    }


if __name__ == "__main__":
    sys.exit(main())
