"""Reading tensor types from GGUF headers without llama.cpp."""

from __future__ import annotations

import pytest

from specllama.errors import ModelLoadError
from specllama.llama.gguf_info import tensor_types

F32, Q4_1, Q8_0 = 0, 3, 8


@pytest.mark.slow
def test_tensor_types_of_the_published_and_the_dequantised_model(smol_q4, smol_f32):
    assert tensor_types(smol_q4) == {F32, Q4_1, Q8_0}
    assert tensor_types(smol_f32) == {F32}


def test_not_a_gguf_file(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        tensor_types(path)


@pytest.mark.slow
def test_a_truncated_header_is_an_error_not_a_guess(smol_q4, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(smol_q4.read_bytes()[:4096])
    with pytest.raises(ModelLoadError, match="header"):
        tensor_types(cut)
