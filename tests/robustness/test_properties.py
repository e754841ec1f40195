"""Property-based checks (hypothesis): any JSON a config.json can hold is loaded or refused cleanly; the linear
GGUF merge derivation equals the every-cut rule on any vocabulary."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

import microformers
from microformers.errors import MicroformersError

from .test_errors import _quadratic_merges

LONG = os.environ.get("MICROFORMERS_FUZZ", "").lower() == "long"
# hypothesis keeps caches in ./.hypothesis by default: keep the repository clean
set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "microformers-hypothesis"))
SETTINGS = settings(
    max_examples=1000 if LONG else 30,
    deadline=None,
    database=None,
    derandomize=not LONG,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

KEYS = [
    "model_type",
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "max_position_embeddings",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "head_dim",
    "tie_word_embeddings",
    "id2label",
    "label2id",
    "num_labels",
    "auto_map",
    "architectures",
    "dtype",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "attention_dropout",
    "to_dict",
    "__class__",
    "name_or_path",
    "use_return_dict",
    "problem_type",
    "hidden_act",
    "custom",
]
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)


@SETTINGS
@given(overrides=st.dictionaries(st.sampled_from(KEYS), JSON_VALUES, max_size=6))
def test_any_config_json_loads_or_is_refused_naming_the_file(tmp_path: Path, overrides: dict[str, Any]) -> None:
    folder = tmp_path / "cfg"
    folder.mkdir(exist_ok=True)
    config = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4, **overrides}
    (folder / "config.json").write_text(json.dumps(config))
    try:
        loaded = microformers.AutoConfig.from_pretrained(folder)
    except MicroformersError as exc:
        if not isinstance(exc, microformers.UnknownModelTypeError):
            assert str(folder / "config.json") in str(exc), exc
        return
    # what loads can be used: printed, serialised and saved again
    assert repr(loaded) and json.loads(loaded.to_json_string())
    loaded.save_pretrained(tmp_path / "again")


@SETTINGS
@given(
    pieces=st.lists(st.text(alphabet="ab▁c", min_size=1, max_size=7), min_size=1, max_size=60, unique=True),
    data=st.data(),
)
def test_merge_derivation_equals_the_every_cut_rule(pieces: list[str], data: Any) -> None:
    from microformers_gguf.tokenizer import derive_merges

    scores = data.draw(st.lists(st.sampled_from([0.0, -1.0, -2.5]), min_size=len(pieces), max_size=len(pieces)))
    assert derive_merges(pieces, scores) == _quadratic_merges(pieces, scores)


pytestmark = pytest.mark.filterwarnings("ignore")
