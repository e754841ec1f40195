"""``question-answering``: extractive answers (spans of the context), long contexts in overlapping windows.

The reference implementation dropped this task in its 5.x line; this one keeps the 4.x interface:
``pipe(question=..., context=...)`` -> ``{"score", "start", "end", "answer"}`` (a list of them, best
first, with ``top_k > 1``), where ``context[start:end] == answer``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from microformers import ConfigError

from ._common import check_text, model_inputs, softmax
from .base import ChunkPipeline

TASK = "question-answering"


class QuestionAnsweringPipeline(ChunkPipeline):
    """Options: ``top_k=1``, ``doc_stride=128`` (tokens shared by neighbouring windows), ``max_seq_len=384``
    (tokens per window, question included), ``max_answer_len=15`` (tokens), ``handle_impossible_answer=False``
    (when true, ``{"score", "start": 0, "end": 0, "answer": ""}`` competes, scored by the classifier token).
    Inputs: ``question=``/``context=`` (strings or equal-length lists), ``{"question": ..., "context": ...}``,
    or a list/iterable of such dicts."""

    def is_single_input(self, inputs: Any, preprocess_params: dict[str, Any]) -> bool:
        return isinstance(inputs, dict) or super().is_single_input(inputs, preprocess_params)

    def __call__(self, inputs: Any = None, *args: Any, question: Any = None, context: Any = None, **kwargs: Any) -> Any:
        if len(args) == 1 and isinstance(inputs, str) and question is None and context is None:
            inputs, question, context = None, inputs, args[0]
            args = ()
        if question is not None or context is not None:
            if inputs is not None:
                raise ConfigError(f"{TASK}: pass either question=/context= or a {{'question', 'context'}} input")
            if question is None or context is None:
                raise ConfigError(f"{TASK}: pass both question= and context=")
            if isinstance(question, list) or isinstance(context, list):
                questions = question if isinstance(question, list) else [question] * len(context)
                contexts = context if isinstance(context, list) else [context] * len(questions)
                if len(questions) != len(contexts):
                    raise ConfigError(f"{TASK}: {len(questions)} questions but {len(contexts)} contexts")
                inputs = [{"question": q, "context": c} for q, c in zip(questions, contexts)]
            else:
                inputs = {"question": question, "context": context}
        return super().__call__(inputs, *args, **kwargs)

    def _sanitize_parameters(
        self,
        top_k: int | None = None,
        doc_stride: int | None = None,
        max_answer_len: int | None = None,
        max_seq_len: int | None = None,
        max_question_len: int | None = None,
        handle_impossible_answer: bool | None = None,
        **unknown: Any,
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        if unknown:
            raise ConfigError(f"{TASK}: unknown option(s) {', '.join(sorted(unknown))}")
        preprocess: dict[str, Any] = {}
        postprocess: dict[str, Any] = {}
        for name, value, target in (
            ("doc_stride", doc_stride, preprocess),
            ("max_seq_len", max_seq_len, preprocess),
            ("max_question_len", max_question_len, preprocess),
            ("top_k", top_k, postprocess),
            ("max_answer_len", max_answer_len, postprocess),
        ):
            if value is None:
                continue
            minimum = 0 if name == "doc_stride" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ConfigError(f"{TASK}: {name}={value!r}; pass an integer >= {minimum}")
            target[name] = value
        if handle_impossible_answer is not None:
            postprocess["handle_impossible_answer"] = bool(handle_impossible_answer)
        return preprocess, {}, postprocess

    def preprocess(
        self, item: Any, doc_stride: int = 128, max_seq_len: int | None = None, max_question_len: int = 64
    ) -> Any:
        if not isinstance(item, dict) or not {"question", "context"} <= set(item):
            raise ConfigError(f"{TASK}: each input is {{'question': ..., 'context': ...}}, got {type(item).__name__}")
        question = check_text(item["question"], TASK, "question").strip()
        context = check_text(item["context"], TASK, "context")
        if len(context.strip()) < len(question):
            raise ConfigError(
                f"{TASK}: the context ({len(context.strip())} characters) is shorter than the question "
                f"({len(question)} characters); the answer is searched in context=, so pass the passage there "
                "and the question as question= (were they swapped?)"
            )
        max_seq_len = max_seq_len or min(384, int(self.tokenizer.model_max_length))
        question_tokens = len(self.tokenizer(question, add_special_tokens=False)["input_ids"])
        room = max_seq_len - question_tokens - self.tokenizer.num_special_tokens_to_add(pair=True)
        if room < 1:
            raise ConfigError(
                f"{TASK}: the question takes {question_tokens} tokens, leaving no room for the context in "
                f"max_seq_len={max_seq_len}; shorten the question or raise max_seq_len"
            )
        stride = doc_stride if doc_stride < room else room // 2
        encoded = self.tokenizer(
            question,
            context,
            truncation="only_second",
            max_length=max_seq_len,
            stride=stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        for i in range(len(encoded["input_ids"])):
            in_context = [sid == 1 for sid in encoded.sequence_ids(i)]
            piece: dict[str, Any] = {
                key: torch.tensor([encoded[key][i]])
                for key in ("input_ids", "attention_mask", "token_type_ids")
                if key in encoded
            }
            piece["context_mask"] = torch.tensor([in_context])
            piece["offsets"] = torch.tensor([[list(span) for span in encoded["offset_mapping"][i]]])
            piece["context"] = context
            yield piece

    def _forward(self, inputs: dict[str, Any]) -> dict[str, Any]:
        outputs = self.model(**model_inputs(self.tokenizer, inputs))
        start = outputs["start_logits"] if "start_logits" in outputs else outputs[0]
        end = outputs["end_logits"] if "end_logits" in outputs else outputs[1]
        keep = ("input_ids", "attention_mask", "context_mask", "offsets", "context")
        return {"start_logits": start, "end_logits": end, **{k: inputs[k] for k in keep}}

    def postprocess(
        self,
        windows: list[dict[str, Any]],
        top_k: int = 1,
        handle_impossible_answer: bool = False,
        max_answer_len: int = 15,
    ) -> dict[str, Any] | list[dict[str, Any]]:
        context = windows[0]["context"]
        best: dict[tuple[int, int], float] = {}
        null_score: float | None = None
        for window in windows:
            spans, window_null = self._window_spans(window, top_k, max_answer_len)
            null_score = window_null if null_score is None else min(null_score, window_null)
            for span, score in spans:
                best[span] = max(score, best.get(span, 0.0))
        answers = [
            {"score": score, "start": start, "end": end, "answer": context[start:end]}
            for (start, end), score in best.items()
        ]
        if handle_impossible_answer and null_score is not None:
            answers.append({"score": null_score, "start": 0, "end": 0, "answer": ""})
        answers.sort(key=lambda answer: answer["score"], reverse=True)
        answers = answers[:top_k]
        return answers[0] if top_k == 1 else answers

    def _window_spans(
        self, window: dict[str, Any], top_k: int, max_answer_len: int
    ) -> tuple[list[tuple[tuple[int, int], float]], float]:
        """The window's ``top_k`` spans ``((start_char, end_char), probability)`` and its no-answer score."""
        real = window["attention_mask"][0].bool().numpy()
        in_context = window["context_mask"][0].bool().numpy() & real
        ids = window["input_ids"][0].tolist()
        cls_id = getattr(self.tokenizer, "cls_token_id", None)
        cls_index = ids.index(cls_id) if cls_id in ids else 0
        allowed = in_context.copy()
        allowed[cls_index] = True
        start = softmax(np.where(allowed, window["start_logits"][0].float().numpy(), -np.inf))
        end = softmax(np.where(allowed, window["end_logits"][0].float().numpy(), -np.inf))
        null_score = float(start[cls_index] * end[cls_index])
        start, end = np.where(in_context, start, 0.0), np.where(in_context, end, 0.0)
        # span (i, j) scores p_start(i) * p_end(j) for i <= j < i + max_answer_len
        table = np.tril(np.triu(np.outer(start, end)), max_answer_len - 1)
        flat = table.ravel()
        order = np.argsort(-flat, kind="stable")[:top_k]
        offsets = window["offsets"][0].tolist()
        spans = []
        for index in order:
            if flat[index] <= 0:
                break
            i, j = divmod(int(index), table.shape[1])
            spans.append(((int(offsets[i][0]), int(offsets[j][1])), float(flat[index])))
        return spans, null_score
