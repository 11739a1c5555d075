"""gcsckpt.dcp.load.archives: stand-in templates against real `torch.save` archives."""

from __future__ import annotations

import io

import pytest
import torch

from gcsckpt.dcp.load.archives import make_templates, matches


def _archive(tensor: torch.Tensor) -> torch.Tensor:
    stream = io.BytesIO()
    torch.save(tensor, stream)
    return torch.frombuffer(bytearray(stream.getvalue()), dtype=torch.uint8)


def _scratch(archive: torch.Tensor, template) -> torch.Tensor:
    return torch.cat([archive[: template.head_len], archive[archive.numel() - template.tail_len :]])


@pytest.mark.parametrize(
    "tensor",
    [
        torch.randn(4, 8),
        torch.arange(300, dtype=torch.int64).reshape(3, 100),
        torch.randn(70000).to(torch.bfloat16),
        torch.tensor(2.5),
    ],
    ids=["f32", "i64", "bf16", "scalar"],
)
def test_template_places_the_storage_of_real_archives(tensor):
    archive = _archive(tensor)
    key = (tensor.dtype, tuple(tensor.shape), archive.numel())
    template = make_templates([key])[key]
    start, end = template.head_len, archive.numel() - template.tail_len
    assert end - start == tensor.nbytes
    assert torch.equal(archive[start:end].view(tensor.dtype).view(tensor.shape), tensor)
    assert matches(template, _scratch(archive, template))  # other CRCs and serialization id
    other = _archive(tensor + 1)
    assert matches(template, _scratch(other, template))
    broken = _scratch(archive, template).clone()
    broken[40] ^= 1  # inside data.pkl's local header or name
    assert not matches(template, broken)


def test_no_template_when_the_archive_differs_in_length_or_is_strided():
    tensor = torch.randn(4, 8)
    length = _archive(tensor).numel()
    assert make_templates([(torch.float32, (4, 8), length + 64)]) == {}
    # A transposed tensor's archive has the same length but another stride in data.pkl.
    transposed = _archive(torch.randn(8, 4).t())
    key = (torch.float32, (4, 8), transposed.numel())
    template = make_templates([key])[key]
    assert not matches(template, _scratch(transposed, template))
