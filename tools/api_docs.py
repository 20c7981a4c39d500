"""Write docs/api.md: every public name oarlock's installed plugins register, grouped by namespace,
with its other spellings and whether Paddle 3.2 and PyTorch have it.

The page is generated from the registry, so it cannot drift: tests/test_api_docs.py regenerates
it and compares. A name counts as a Paddle (torch) spelling when the installed paddle (torch) has
the attribute at the corresponding path: `oarlock.X` -> `paddle.X` / `torch.X`,
`Tensor.X` -> `paddle.Tensor.X` / `torch.Tensor.X`, `oarlock.compat.X` -> `torch.X` (compat
holds torch's semantics). A listed spelling means the name exists there; the semantics are
Paddle's except under oarlock.compat. Without paddle or torch installed, the header says so.

It also measures Paddle API coverage: for each Paddle 3.2 namespace with an `__all__` list (and
paddle.Tensor's public methods), how many of its names the same path under oarlock has. The table
heads docs/api.md (followed by the missing names) and is copied into README.md between the
coverage markers.

    python tools/api_docs.py            # write docs/api.md and README.md's coverage table
    python tools/api_docs.py --check    # exit 1 if either is not what the registry says
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "docs" / "api.md"
README = OUT.parents[1] / "README.md"
README_START, README_END = "<!-- paddle-coverage:start -->", "<!-- paddle-coverage:end -->"

# Paddle 3.2 namespaces whose public names (their __all__; paddle.Tensor: its public methods) are counted
COVERAGE = ["paddle", "paddle.Tensor", "paddle.nn", "paddle.nn.functional", "paddle.nn.initializer",
            "paddle.linalg", "paddle.fft", "paddle.signal", "paddle.amp", "paddle.autograd", "paddle.optimizer",
            "paddle.optimizer.lr", "paddle.io", "paddle.metric", "paddle.vision", "paddle.vision.models",
            "paddle.vision.ops", "paddle.vision.transforms", "paddle.vision.datasets", "paddle.text",
            "paddle.callbacks", "paddle.hapi", "paddle.static", "paddle.jit", "paddle.device",
            "paddle.device.cuda", "paddle.distributed", "paddle.distributed.fleet", "paddle.incubate",
            "paddle.incubate.nn", "paddle.incubate.nn.functional", "paddle.profiler", "paddle.utils",
            "paddle.sparse", "paddle.geometric", "paddle.distribution", "paddle.quantization"]

# oarlock namespace -> (paddle path, torch path); None: that framework has no counterpart
COUNTERPARTS = {
    "oarlock": ("paddle", "torch"), "Tensor": ("paddle.Tensor", "torch.Tensor"),
    "oarlock.nn": ("paddle.nn", "torch.nn"), "oarlock.nn.functional": ("paddle.nn.functional", "torch.nn.functional"),
    "oarlock.nn.utils": ("paddle.nn.utils", "torch.nn.utils"),
    "oarlock.nn.initializer": ("paddle.nn.initializer", None), "oarlock.nn.init": ("paddle.nn.init", "torch.nn.init"),
    "oarlock.nn.attention": (None, "torch.nn.attention"), "oarlock.amp": ("paddle.amp", "torch.amp"),
    "oarlock.special": (None, "torch.special"), "oarlock.linalg": ("paddle.linalg", "torch.linalg"),
    "oarlock.distributed": ("paddle.distributed", "torch.distributed"),
    "oarlock.compat": ("paddle.compat", "torch"), "oarlock.optimizer": ("paddle.optimizer", "torch.optim"),
    "oarlock.optimizer.lr": ("paddle.optimizer.lr", "torch.optim.lr_scheduler"), "oarlock.io": ("paddle.io", None),
    "oarlock.utils.tensorboard": (None, "torch.utils.tensorboard"),
}


def _module(path: str | None):
    """The object at a dotted path such as "paddle.nn.functional" or "torch.Tensor", or None."""
    if path is None:
        return None
    parts = path.split(".")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            obj = importlib.import_module(parts[0])
    except Exception:
        return None
    for part in parts[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            try:
                obj = importlib.import_module(".".join(parts[:parts.index(part) + 1]))
            except Exception:
                return None
    return obj


def _entries(registry) -> list[dict]:
    """One entry per public object: its qualified names, kind and one-line description."""
    by_object: dict[int, dict] = {}
    for namespace, names in registry.public_api().items():   # the op library oarlock.ops.* is left out
        for name, (obj, plugin) in names.items():
            key = id(getattr(obj, "opdef", obj))
            entry = by_object.setdefault(key, {"names": [], "obj": obj, "plugin": plugin})
            entry["names"].append(f"{namespace}.{name}")
    entries = []
    for entry in by_object.values():
        obj = entry["obj"]
        entry["names"].sort(key=lambda n: (n.startswith("Tensor."), n.count("."), n))
        entry["kind"] = ("op" if hasattr(obj, "opdef") else "class" if isinstance(obj, type)
                         else "function" if callable(obj) else "value")
        doc = (getattr(obj, "__doc__", None) or "").strip().split("\n")[0] if entry["kind"] != "value" else ""
        entry["doc"] = doc[:110] + ("..." if len(doc) > 110 else "")
        entries.append(entry)
    return entries


def _spellings(names: list, column: int, frameworks: dict) -> str:
    found = []
    for qualified in names:
        namespace, _, name = qualified.rpartition(".")
        target = COUNTERPARTS.get(namespace, (None, None))[column]
        module = frameworks.get(target)
        if module is not None and hasattr(module, name):
            found.append(f"`{target}.{name}`")
    return ", ".join(dict.fromkeys(found)) or "-"


def _paddle_names(path: str, paddle_module) -> list[str] | None:
    """The public names Paddle 3.2 lists for `path` (its __all__; paddle.Tensor: dir without "_" names)."""
    if path == "paddle.Tensor":
        return sorted(n for n in dir(paddle_module) if not n.startswith("_"))
    names = getattr(paddle_module, "__all__", None)
    return sorted(set(names)) if names else None


def _has(path: str, name: str) -> bool:
    """Whether oarlock has `name` at the path corresponding to Paddle's `path` (paddle.X -> oarlock.X)."""
    if path == "paddle.Tensor":   # methods come from the registry; the class itself holds only the core's
        from oarlock.registry import TENSOR, default_registry
        import oarlock
        return name in dir(oarlock.Tensor) or name in default_registry().api[TENSOR]
    target = _module("oarlock" + path[len("paddle"):])
    if target is None:
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return hasattr(target, name)
    except Exception:
        return False


def coverage() -> list[tuple[str, list[str], list[str]]]:
    """(Paddle namespace, its names, the names oarlock lacks) for each COVERAGE namespace Paddle has."""
    rows = []
    for path in COVERAGE:
        paddle_module = _module(path)
        names = _paddle_names(path, paddle_module) if paddle_module is not None else None
        if names:
            rows.append((path, names, [n for n in names if not _has(path, n)]))
    return rows


def coverage_table(rows) -> list[str]:
    total = sum(len(names) for _, names, _ in rows)
    have = total - sum(len(missing) for _, _, missing in rows)
    lines = ["| Paddle 3.2 namespace | Paddle's public names | oarlock has | coverage |", "|---|---:|---:|---:|"]
    for path, names, missing in rows:
        lines.append(f"| `{path}` | {len(names)} | {len(names) - len(missing)} | "
                     f"{100 * (len(names) - len(missing)) / len(names):.0f}% |")
    lines.append(f"| **all** | {total} | {have} | {100 * have / max(total, 1):.0f}% |")
    return lines


def _readme_with(table: list[str], readme: str) -> str:
    start, end = readme.find(README_START), readme.find(README_END)
    if start < 0 or end < start:
        raise SystemExit(f"README.md lacks the markers {README_START} ... {README_END}")
    return readme[:start + len(README_START)] + "\n" + "\n".join(table) + "\n" + readme[end:]


def render() -> str:
    import oarlock  # noqa: F401  (loads the plugins on first registry use)
    from oarlock.registry import TENSOR, default_registry
    registry = default_registry()
    targets = {path for pair in COUNTERPARTS.values() for path in pair if path}
    frameworks = {path: _module(path) for path in sorted(targets)}
    have_paddle, have_torch = _module("paddle") is not None, _module("torch") is not None
    entries = _entries(registry)
    lines = ["# oarlock API", "",
             "Generated by `python tools/api_docs.py` from the registry of the installed plugins; do not edit. "
             "Each row is one object with all its public spellings; the Paddle and torch columns list the "
             "spellings the installed Paddle "
             + ("3.2" if have_paddle else "(not installed)") + " and PyTorch "
             + ("" if have_torch else "(not installed) ") + "also have.", "",
             f"{len(entries)} objects, {sum(len(e['names']) for e in entries)} public names.", ""]
    rows = coverage() if have_paddle else []
    if rows:
        lines += ["## Paddle API coverage", "",
                  "How many of Paddle 3.2's public names (each namespace's `__all__`; paddle.Tensor: its public "
                  "methods and properties) the same path under oarlock has (`paddle.X.name` -> `oarlock.X.name`).",
                  "", *coverage_table(rows), "", "Missing, per namespace:", ""]
        lines += [f"- `{path}` ({len(missing)}): " + ", ".join(missing) for path, _, missing in rows if missing]
        lines.append("")
    order = list(COUNTERPARTS)   # the namespaces plugins created, those with a counterpart first, Tensor last
    for namespace in sorted(registry.public_api(), key=lambda ns: (ns == TENSOR, order.index(ns) if ns in order
                                                                   else len(order), ns)):
        rows = [e for e in entries if e["names"][0].rpartition(".")[0] == namespace]
        if not rows:
            continue
        lines += [f"## {namespace}", "", "| name | also | kind | Paddle | torch | what it does |",
                  "|---|---|---|---|---|---|"]
        for e in sorted(rows, key=lambda e: e["names"][0]):
            first, *others = e["names"]
            also = ", ".join(f"`{n}`" for n in others) or "-"
            lines.append(f"| `{first}` | {also} | {e['kind']} | {_spellings(e['names'], 0, frameworks)} | "
                         f"{_spellings(e['names'], 1, frameworks)} | {e['doc'].replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Write docs/api.md from the registry of the installed plugins.")
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 if docs/api.md differs")
    parser.add_argument("--output", type=Path, default=OUT, help=f"where to write (default {OUT})")
    args = parser.parse_args(argv)
    text = render()
    readme = README.read_text()
    table = coverage_table(coverage()) if _module("paddle") is not None else None
    new_readme = _readme_with(table, readme) if table else readme
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        stale = [str(path) for path, now, want in ((args.output, current, text), (README, readme, new_readme))
                 if now != want]
        if stale:
            print(f"{', '.join(stale)} out of date: run python tools/api_docs.py", file=sys.stderr)
            return 1
        print(f"{args.output} and README.md's coverage table are up to date")
        return 0
    args.output.write_text(text)
    if new_readme != readme:
        README.write_text(new_readme)
    print(f"wrote {args.output} ({text.count(chr(10))} lines) and README.md's coverage table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
