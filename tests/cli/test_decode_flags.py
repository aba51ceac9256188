"""``pigviz generate --placement`` and ``--threads``: parsed, forwarded to MagicPIG, refused
elsewhere with the option named."""

import pytest
import torch

from pigviz.cli import build_parser, main


def test_placement_and_threads_parse():
    args = build_parser().parse_args(["generate", "--prompt", "Hi", "--placement", "cpu_offload", "--threads", "2"])
    assert args.placement == "cpu_offload" and args.threads == 2
    assert build_parser().parse_args(["generate", "--prompt", "Hi"]).placement is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--prompt", "Hi", "--placement", "gpu"])


@pytest.mark.slow
@pytest.mark.model
def test_generate_with_the_cpu_offload_runs(smollm2, capsys):
    argv = ["generate", "--prompt", "The capital of France is", "--max-new-tokens", "3", "--quiet"]
    argv += ["--K", "4", "--L", "8", "--sinks", "1", "--recent", "2"]
    threads = torch.get_num_threads()
    try:
        assert main(argv + ["--placement", "cpu_offload", "--threads", "2"]) == 0
    finally:
        torch.set_num_threads(threads)  # --threads sets torch's count for the whole process
    assert "[magicpig]" in capsys.readouterr().err
    assert main(argv[:5] + ["--attention", "topk", "--placement", "cpu_offload", "--quiet"]) == 2
    assert "unknown option(s) placement" in capsys.readouterr().err
