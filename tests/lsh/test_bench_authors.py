"""benchmarks/build_authors_kernels.py and bench_authors.py: the three setup.py changes apply (or
name what no longer matches), and without a build the harness skips with its message."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"

# The lines of the authors' two setup.py files that the build changes (their build config,
# abridged: the patch must find exactly these).
LSH_SETUP = """from torch.utils.cpp_extension import CppExtension
import setuptools
ext_modules = [CppExtension("lsh", sources=["lsh.cc"],
    extra_compile_args=["-mavx512f", "-fopenmp", "-D_GLIBCXX_USE_CXX11_ABI=0","-std=c++17", '-O3'])]
setuptools.setup(name="lsh", version="0.1.0", ext_modules=ext_modules)
"""
SPARSE_SETUP = """from torch.utils.cpp_extension import CppExtension
import setuptools

import cpuinfo
import subprocess
def supports_avx512_bf16():
    try:
        info = cpuinfo.get_cpu_info()
        return "avx512_bf16" in info.get("flags", [])
    except Exception:
        return False

def is_gcc_version_greater_than_11():
    return True

avx_flags = []
if supports_avx512_bf16() and is_gcc_version_greater_than_11():
    avx_flags.extend(["-mavx512bf16"])
ext_modules = [CppExtension("sparse_attention_cpu", sources=["sparse_attention.cc"],
        include_dirs=["3rdparty/FBGEMM/include"],
        extra_compile_args=avx_flags + ["-mavx512f", "-fopenmp", "-D_GLIBCXX_USE_CXX11_ABI=0", "-std=c++17"])]
"""


def _load(name):
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def tree(tmp_path):
    for rel, text in (("library/lsh/setup.py", LSH_SETUP), ("library/sparse_attention/setup.py", SPARSE_SETUP)):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "library/sparse_attention/3rdparty/FBGEMM/include").mkdir(parents=True)
    return tmp_path


@pytest.mark.parametrize("bf16", [True, False])
def test_the_three_setup_changes_apply(tree, bf16):
    build = _load("build_authors_kernels")
    build.patch_setups(tree, bf16)
    lsh = (tree / "library/lsh/setup.py").read_text()
    sparse = (tree / "library/sparse_attention/setup.py").read_text()
    assert "_GLIBCXX_USE_CXX11_ABI" not in lsh and "_GLIBCXX_USE_CXX11_ABI" not in sparse
    fbgemm = str((tree / "library/sparse_attention/3rdparty/FBGEMM/include").resolve())
    assert f"include_dirs=[{fbgemm!r}]" in sparse
    assert "import cpuinfo" not in sparse and f"return {bf16!r}  # pigviz" in sparse
    namespace = {}
    exec(compile(sparse.split("avx_flags = []")[0], "setup.py", "exec"), namespace)  # the defs only
    assert namespace["supports_avx512_bf16"]() is bf16


def test_a_changed_setup_is_named(tree):
    build = _load("build_authors_kernels")
    path = tree / "library/sparse_attention/setup.py"
    path.write_text(path.read_text().replace('include_dirs=["3rdparty/FBGEMM/include"]', "include_dirs=[]"))
    with pytest.raises(SystemExit) as stop:
        build.patch_setups(tree, True)
    assert stop.value.code == 2


def test_without_a_build_the_harness_skips(monkeypatch, capsys):
    bench = _load("bench_authors")
    monkeypatch.setattr(bench, "find_build", lambda folder=None: None)
    assert bench.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith(bench.SKIP) and "build_authors_kernels.py --source" in out


def test_a_missing_source_is_refused(tmp_path):
    build = _load("build_authors_kernels")
    with pytest.raises(SystemExit) as stop:
        build.build(tmp_path / "nowhere", tmp_path / "out", "off", force=False)
    assert stop.value.code == 2


def test_cpu_flags_are_read_whole(tmp_path):
    build = _load("build_authors_kernels")
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512_vnni\n")
    # avx512_vnni is not avx512f: a substring test would take it for one
    assert not build.cpu_has_avx512f(info) and not build.cpu_has_avx512bf16(info)
    info.write_text("flags\t\t: fpu avx2 avx512f avx512_bf16\n")
    assert build.cpu_has_avx512f(info) and build.cpu_has_avx512bf16(info)
    assert not build.cpu_has_avx512f(tmp_path / "missing")


def test_without_avx512_the_harness_skips_before_running_theirs(monkeypatch, capsys):
    bench = _load("bench_authors")
    build = _load("build_authors_kernels")
    monkeypatch.setattr(bench, "find_build", lambda folder=None: {"commit": "0" * 40, "modules": {}})
    monkeypatch.setattr(build, "cpu_has_avx512f", lambda path="/proc/cpuinfo": False)
    monkeypatch.setitem(sys.modules, "build_authors_kernels", build)
    ran = []
    monkeypatch.setattr(bench.subprocess, "run", lambda *a, **k: ran.append(a))
    assert bench.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith(bench.SKIP) and "AVX-512" in out and not ran
