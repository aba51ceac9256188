"""Which commands follow the GPU when one is present, and which stay on the CPU their shipped
results were made on."""

import pytest

from pigviz.cli import build_parser
from pigviz.cli.decode import _eval_command


@pytest.mark.parametrize(
    "argv,device",
    [
        (["generate", "--prompt", "Hi"], "auto"),
        (["capture", "--out", "x.safetensors"], "auto"),
        # Their recorded commands name no device: rerunning one must stay on the CPU.
        (["eval"], "cpu"),
        (["study", "--out", "x.json"], "cpu"),
    ],
)
def test_device_defaults(argv, device):
    assert build_parser().parse_args(argv).device == device


def test_eval_command_names_a_device_or_dtype_other_than_the_default():
    parser = build_parser()
    plain = _eval_command(parser.parse_args(["eval", "--task", "passkey"]))
    assert "--device" not in plain and "--dtype" not in plain
    gpu = _eval_command(parser.parse_args(["eval", "--task", "passkey", "--device", "cuda", "--dtype", "bf16"]))
    assert "--device cuda" in gpu and "--dtype bf16" in gpu
