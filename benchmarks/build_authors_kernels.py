"""Build the MagicPIG authors' CPU kernels (their ``library/lsh`` and ``library/sparse_attention``,
Infini-AI-Lab/MagicPIG) OUTSIDE this repository, for ``benchmarks/bench_authors.py``.

    python benchmarks/build_authors_kernels.py --source PATH      # a checkout, or a (bare) git dir
    MAGICPIG_SRC=PATH python benchmarks/build_authors_kernels.py

Their sources are used unchanged; a scratch copy (default ``~/.cache/pigviz/authors/<commit>``,
``--build-dir``) gets three changes to the two ``setup.py`` files so that they build against a
current torch (2.13 here):

1. ``-D_GLIBCXX_USE_CXX11_ABI=0`` is dropped (torch's wheels use the new ABI);
2. the FBGEMM include path becomes absolute: setuptools compiles from ``build/``, where the
   relative path finds nothing and torch's own, newer ``fbgemm/Types.h`` is included instead;
3. ``-mavx512bf16`` is chosen by a switch (``--avx512bf16 auto|on|off``; auto reads
   /proc/cpuinfo) instead of their py-cpuinfo probe, a package this environment lacks.

Their ``num_threads(64)`` clauses take ``OMP_THREAD_LIMIT`` as the thread count (the harness
sets it per run). Writes ``built.json`` in the build folder (what was built, from which commit,
with which flags) and prints the folder; exits 2 with a message when a compiler, torch's
headers or their sources are missing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# What the build needs from their repository (the FBGEMM submodule's third_party is not used).
WANTED = (
    "library/lsh/lsh.cc",
    "library/lsh/lsh.h",
    "library/lsh/setup.py",
    "library/sparse_attention/sparse_attention.cc",
    "library/sparse_attention/sparse_attention.h",
    "library/sparse_attention/setup.py",
    "library/sparse_attention/3rdparty/FBGEMM/include",
    "library/sparse_attention/3rdparty/FBGEMM/src",
)
MODULES = {"lsh": "library/lsh", "sparse_attention_cpu": "library/sparse_attention"}
DEFAULT_ROOT = Path(os.environ.get("PIGVIZ_CACHE_DIR", Path.home() / ".cache" / "pigviz")) / "authors"


class Missing(SystemExit):
    """A prerequisite is missing: exit 2 with the message."""

    def __init__(self, message: str):
        print(f"cannot build the authors' kernels: {message}", file=sys.stderr)
        super().__init__(2)


def _git_dir(source: Path) -> bool:
    probe = subprocess.run(["git", "-C", str(source), "rev-parse", "--git-dir"], capture_output=True, text=True)
    return probe.returncode == 0


def _commit(source: Path) -> str:
    if not _git_dir(source):
        return "tree-" + hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:12]
    out = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def fetch_sources(source: Path, dest: Path) -> None:
    """Copy the wanted paths from a work tree, or extract them from a git directory (a mirror
    may lack objects elsewhere, e.g. large images, so only these paths are read)."""
    if (source / "library" / "lsh" / "lsh.cc").is_file():
        for rel in WANTED:
            src = source / rel
            if not src.exists():
                raise Missing(f"{src} is missing")
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dest / rel, dirs_exist_ok=True)
            else:
                shutil.copy2(src, dest / rel)
        return
    if not _git_dir(source):
        raise Missing(f"{source} is neither a MagicPIG checkout (library/lsh/lsh.cc) nor a git directory")
    archive = subprocess.run(["git", "-C", str(source), "archive", "HEAD", *WANTED], capture_output=True)
    if archive.returncode != 0:
        raise Missing(f"git archive failed in {source}: {archive.stderr.decode(errors='replace').strip()[:300]}")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)


def _replace(text: str, old: str, new: str, what: str, path: Path) -> str:
    if old not in text:
        raise Missing(f"{path} no longer reads as expected ({what}); update the patch in {Path(__file__).name}")
    return text.replace(old, new)


def patch_setups(root: Path, avx512bf16: bool) -> None:
    """The three changes of the module docstring, each checked to have applied."""
    lsh = root / "library/lsh/setup.py"
    text = lsh.read_text(encoding="utf-8")
    text = _replace(text, '"-D_GLIBCXX_USE_CXX11_ABI=0",', "", "the ABI flag", lsh)
    lsh.write_text(text, encoding="utf-8")

    sparse = root / "library/sparse_attention/setup.py"
    text = sparse.read_text(encoding="utf-8")
    text = _replace(text, '"-D_GLIBCXX_USE_CXX11_ABI=0", ', "", "the ABI flag", sparse)
    fbgemm = (root / "library/sparse_attention/3rdparty/FBGEMM/include").resolve()
    text = _replace(
        text, 'include_dirs=["3rdparty/FBGEMM/include"]', f"include_dirs=[{str(fbgemm)!r}]", "FBGEMM path", sparse
    )
    text = _replace(text, "import cpuinfo\n", "", "the py-cpuinfo import", sparse)
    text, count = re.subn(
        r"def supports_avx512_bf16\(\):.*?\n(?=def )",
        f"def supports_avx512_bf16():\n    return {avx512bf16!r}  # pigviz: chosen by a switch\n\n",
        text,
        flags=re.S,
    )
    if count != 1:
        raise Missing(f"{sparse} no longer has supports_avx512_bf16(); update the patch in {Path(__file__).name}")
    sparse.write_text(text, encoding="utf-8")


def _cpu_flags(path="/proc/cpuinfo") -> set[str]:
    try:
        text = Path(path).read_text(encoding="ascii", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def cpu_has_avx512bf16(path="/proc/cpuinfo") -> bool:
    return "avx512_bf16" in _cpu_flags(path)


def cpu_has_avx512f(path="/proc/cpuinfo") -> bool:
    """Their kernels are written with AVX-512 intrinsics (``_mm512_*``) and compiled with
    ``-mavx512f`` whatever the CPU: on a CPU without AVX-512 they build, then die of an illegal
    instruction (SIGILL) at their first call."""
    return "avx512f" in _cpu_flags(path)


def _built_module(folder: Path, name: str) -> Path | None:
    found = sorted(folder.glob(f"{name}*.so")) + sorted(folder.glob(f"{name}*.pyd"))
    return found[0] if found else None


def build(source: Path, build_dir: Path | None, avx512bf16: str, force: bool) -> Path:
    for tool in ("g++", "gcc"):
        if shutil.which(os.environ.get("CXX" if tool == "g++" else "CC", tool)) is None:
            raise Missing(f"no {tool} on PATH (their kernels are C++17 with OpenMP and AVX-512)")
    try:
        import torch.utils.cpp_extension as ext  # noqa: F401
    except ImportError as exc:
        raise Missing(f"torch's C++ extension support is missing ({exc})") from exc
    if not source.exists():
        raise Missing(f"{source} does not exist")
    bf16 = cpu_has_avx512bf16() if avx512bf16 == "auto" else avx512bf16 == "on"
    commit = _commit(source)
    folder = build_dir or DEFAULT_ROOT / f"{commit[:12]}-{'bf16' if bf16 else 'nobf16'}"
    done = folder / "built.json"
    if done.is_file() and not force:
        info = json.loads(done.read_text(encoding="utf-8"))
        if all(Path(p).is_file() for p in info["modules"].values()):
            print(f"already built: {folder}")
            return folder
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    fetch_sources(source, folder)
    patch_setups(folder, bf16)
    modules = {}
    for name, rel in MODULES.items():
        where = folder / rel
        print(f"building {name} in {where} ...", flush=True)
        run = subprocess.run(
            [sys.executable, "setup.py", "build_ext", "--inplace"], cwd=where, capture_output=True, text=True
        )
        (where / "build.log").write_text(run.stdout + run.stderr, encoding="utf-8")
        built = _built_module(where, name)
        if run.returncode != 0 or built is None:
            tail = "\n".join((run.stdout + run.stderr).strip().splitlines()[-25:])
            raise Missing(f"building {name} failed (log: {where / 'build.log'}):\n{tail}")
        modules[name] = str(built)
    info = {
        "source": str(source),
        "commit": commit,
        "avx512bf16": bf16,
        "modules": modules,
        "patches": ["drop -D_GLIBCXX_USE_CXX11_ABI=0", "absolute FBGEMM include path", "-mavx512bf16 by a switch"],
        "python": sys.version.split()[0],
    }
    done.write_text(json.dumps(info, indent=1), encoding="utf-8")
    print(f"built: {folder}")
    return folder


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=os.environ.get("MAGICPIG_SRC"), help="MagicPIG checkout or git dir")
    parser.add_argument("--build-dir", type=Path, default=None, help=f"scratch folder (default under {DEFAULT_ROOT})")
    parser.add_argument("--avx512bf16", choices=("auto", "on", "off"), default="auto")
    parser.add_argument("--force", action="store_true", help="rebuild even if built.json is there")
    args = parser.parse_args(argv)
    if not args.source:
        raise Missing("give --source PATH (or MAGICPIG_SRC): a checkout or git dir of Infini-AI-Lab/MagicPIG")
    build(Path(args.source).expanduser(), args.build_dir, args.avx512bf16, args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
