"""Builds what spark-submit ships to a cluster, so no executor needs this repository or its
.venv (`make spark-dist`; docs/data-pipeline.md has the spark-submit lines):

    OUT/xnode_spark.zip     --py-files: every module of spark_jobs and the first-party modules
                            (xnode, xmtp, xnode_api) they import, found by following their imports
    OUT/launcher.py         the primary resource: `launcher.py JOB ARGS...`
    OUT/requirements.txt    the third-party distributions those modules import, pinned to this
                            venv's versions; pyspark and py4j are left out (every Spark
                            installation has them in python/lib/)
    OUT/environment.pex     --files, and spark.pyspark.python=./environment.pex: a PEX of
                            requirements.txt with its dependencies, the executors' interpreter

Nothing is listed by hand: a new job module in spark_jobs/ ships with whatever it imports.
The PEX holds no interpreter: executors need the Python its shebang names (`--python`, by
default this interpreter's version on their PATH).

    python -m spark_jobs.packaging --out dist/spark [--python /usr/bin/python3.11] [--no-env]
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SOURCE_ROOTS = (REPO_ROOT, REPO_ROOT / "src")
JOBS_PACKAGE = "spark_jobs"
FIRST_PARTY = frozenset({JOBS_PACKAGE, "xnode", "xmtp", "xnode_api"})
BUILD_ONLY = frozenset({f"{JOBS_PACKAGE}.packaging"})  # runs here, never on a cluster
SPARK_PROVIDED = frozenset({"pyspark", "py4j"})
DEFAULT_OUT = REPO_ROOT / "dist" / "spark"
ZIP_NAME = "xnode_spark.zip"
LAUNCHER_NAME = "launcher.py"
REQUIREMENTS_NAME = "requirements.txt"
ENVIRONMENT_NAME = "environment.pex"
# What environment.pex runs on unless told: this interpreter's version, found on PATH.
DEFAULT_PYTHON = f"/usr/bin/env python{sys.version_info.major}.{sys.version_info.minor}"
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed, so the same sources make the same zip


class PackagingError(Exception):
    """The jobs cannot be packaged; the message says why."""


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    root: Path

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"

    @property
    def arcname(self) -> str:
        return self.path.relative_to(self.root).as_posix()


def find_module(name: str, sources: Sequence[Path] = SOURCE_ROOTS) -> Module | None:
    """The first-party source file of a dotted module name, as Python would find it."""
    parts = name.split(".")
    for root in sources:
        base = root.joinpath(*parts)
        for path in (base / "__init__.py", base.parent / f"{parts[-1]}.py"):
            if path.is_file():
                return Module(name, path, root)
    return None


def job_modules() -> list[str]:
    """Every module of spark_jobs that may run on a cluster (the roots of the closure)."""
    package = REPO_ROOT / JOBS_PACKAGE
    names = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(REPO_ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name not in BUILD_ONLY:
            names.append(name)
    return names


# --- following imports ------------------------------------------------------------------------


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, in functions too; not those only type checkers run."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _absolute(node: ast.ImportFrom, module: Module) -> str:
    if node.level == 0:
        return node.module or ""
    package = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    if node.level > len(package):
        raise PackagingError(f"{module.path}: relative import beyond the top-level package")
    anchor = ".".join(package[: len(package) - node.level + 1])
    return f"{anchor}.{node.module}" if node.module else anchor


@dataclass(frozen=True)
class Imports:
    modules: frozenset[str]  # certainly modules: `import a.b`, the `a.b` of `from a.b import c`
    maybe_modules: frozenset[str]  # `a.b.c` of `from a.b import c`: a module or a name in one


def imports_of(module: Module) -> Imports:
    tree = ast.parse(module.path.read_bytes(), str(module.path))
    modules: set[str] = set()
    maybe: set[str] = set()
    for node in _import_nodes(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
            continue
        base = _absolute(node, module)
        modules.add(base)
        maybe.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return Imports(frozenset(modules), frozenset(maybe))


def _prefixes(name: str) -> list[str]:
    """Importing `a.b.c` runs `a` and `a.b` first."""
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _is_third_party(name: str) -> bool:
    top = name.partition(".")[0]
    return bool(top) and top not in FIRST_PARTY and top not in sys.stdlib_module_names


@dataclass(frozen=True)
class Closure:
    modules: dict[str, Module]  # first-party, by name
    third_party: frozenset[str]  # dotted names imported from outside


def follow_imports(roots: Iterable[str], sources: Sequence[Path] = SOURCE_ROOTS) -> Closure:
    """The first-party modules the roots import, transitively, and what they import from
    third parties. A first-party module that does not exist is an error."""
    found: dict[str, Module] = {}
    third: set[str] = set()
    pending: list[tuple[str, bool]] = [(name, True) for name in roots]
    while pending:
        name, required = pending.pop()
        if _is_third_party(name):
            third.update([name] if required else [])
            continue
        if name.partition(".")[0] not in FIRST_PARTY:
            continue  # the standard library
        for prefix in _prefixes(name):
            if prefix in found:
                continue
            module = find_module(prefix, sources)
            if module is None:
                if required or prefix != name:
                    raise PackagingError(f"first-party module {prefix} not found under the sources")
                continue
            found[prefix] = module
            imports = imports_of(module)
            pending += [(n, True) for n in imports.modules]
            pending += [(n, False) for n in imports.maybe_modules]
    return Closure(found, frozenset(third))


# --- third-party distributions ----------------------------------------------------------------


def _normalized(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _file_owners() -> dict[Path, str]:
    """Installed file -> the distribution that installed it, for this interpreter."""
    owners: dict[Path, str] = {}
    for dist in importlib.metadata.distributions():
        name = _normalized(dist.metadata["Name"])
        for file in dist.files or ():
            owners[Path(str(dist.locate_file(file))).resolve()] = name
    return owners


def _origin(name: str) -> Path | None:
    """The file of the shortest prefix of `name` that is a regular module or package
    (namespace packages such as `google` belong to no single distribution)."""
    for prefix in _prefixes(name):
        try:
            spec = importlib.util.find_spec(prefix)
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        if spec.origin and spec.has_location:
            return Path(spec.origin).resolve()
    return None


def distributions(modules: Iterable[str]) -> dict[str, str]:
    """Distribution -> installed version, for every imported third-party module; the ones
    Spark provides are left out."""
    owners = _file_owners()
    found: dict[str, str] = {}
    for name in sorted(modules):
        origin = _origin(name)
        owner = owners.get(origin) if origin is not None else None
        if owner is None:
            raise PackagingError(f"{name} is imported by the jobs but is not installed here")
        if owner not in SPARK_PROVIDED:
            found[owner] = importlib.metadata.version(owner)
    return found


def pins(versions: dict[str, str]) -> list[str]:
    return [f"{name}=={version}" for name, version in sorted(versions.items())]


# --- the outputs ------------------------------------------------------------------------------


def write_zip(modules: Iterable[Module], target: Path) -> list[str]:
    """A deterministic zip of the modules' sources (zipimport needs nothing more)."""
    entries = sorted({m.arcname: m for m in modules}.items())
    with _atomic(target) as temp, zipfile.ZipFile(temp, "w", zipfile.ZIP_DEFLATED) as archive:
        for arcname, module in entries:
            info = zipfile.ZipInfo(arcname, _ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, module.path.read_bytes())
    return [name for name, _ in entries]


@contextmanager
def _atomic(target: Path) -> Iterator[Path]:
    """A temporary path beside `target` that replaces it on success."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    temp = Path(name)
    try:
        yield temp
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    temp.chmod(0o644)
    os.replace(temp, target)


def build_environment(requirements: list[str], target: Path, python: str) -> None:
    """A PEX of the requirements and their dependencies at this venv's versions (pex resolves
    them from it, asking no index). It runs as the executors' interpreter: the Python named
    by its shebang with the shipped distributions on top; `fallback` keeps what pyspark puts
    on PYTHONPATH (its own zips, --py-files) importable behind them."""
    command = [sys.executable, "-m", "pex", f"--venv-repository={sys.prefix}", *requirements]
    command += ["--inherit-path=fallback", f"--python-shebang={python}"]
    with _atomic(target) as temp:
        done = subprocess.run(
            [*command, "--output-file", str(temp)], capture_output=True, text=True
        )
        if done.returncode != 0:
            raise PackagingError(f"pex failed:\n{done.stderr.strip()}")
    target.chmod(0o755)


def _requirements_text(lines: list[str], python: str | None) -> str:
    header = [
        "# Third-party distributions the Spark executors need for spark_jobs: what the jobs",
        "# import directly (pip, or pex for environment.pex, adds their dependencies).",
        "# pyspark and py4j come from the Spark installation (python/lib/*.zip).",
        "# Generated by `make spark-dist` (python -m spark_jobs.packaging); do not edit.",
    ]
    if python is not None:
        header.append(f"# environment.pex runs on {python}.")
    return "\n".join([*header, *lines]) + "\n"


@dataclass(frozen=True)
class Dist:
    out: Path
    zip_entries: list[str]
    direct: list[str]
    python: str | None  # the environment's interpreter; None: no environment built


def build(
    out: Path = DEFAULT_OUT, python: str | None = None, with_environment: bool = True
) -> Dist:
    closure = follow_imports(job_modules())
    direct = pins(distributions(closure.third_party))
    entries = write_zip(closure.modules.values(), out / ZIP_NAME)
    with _atomic(out / LAUNCHER_NAME) as temp:
        shutil.copyfile(Path(__file__).with_name("launcher.py"), temp)
    if with_environment:
        python = python or DEFAULT_PYTHON
        build_environment(direct, out / ENVIRONMENT_NAME, python)
    else:
        python = None
        (out / ENVIRONMENT_NAME).unlink(missing_ok=True)  # never ship a stale one
    with _atomic(out / REQUIREMENTS_NAME) as temp:
        temp.write_text(_requirements_text(direct, python))
    return Dist(out, entries, direct, python)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    parser.add_argument(
        "--python",
        default=None,
        help="the executors' interpreter, as environment.pex's shebang runs it "
        f"(default: {DEFAULT_PYTHON!r}, found on their PATH)",
    )
    parser.add_argument(
        "--no-env", action="store_true", help="skip environment.pex (executors bring their own)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        dist = build(args.out, args.python, with_environment=not args.no_env)
    except PackagingError as exc:
        print(f"packaging: error: {exc}", file=sys.stderr)
        return 2
    print(f"{dist.out / ZIP_NAME}: {len(dist.zip_entries)} modules")
    print(f"{dist.out / REQUIREMENTS_NAME}: needs {', '.join(dist.direct)}")
    if dist.python is not None:
        print(f"{dist.out / ENVIRONMENT_NAME}: runs on {dist.python}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
