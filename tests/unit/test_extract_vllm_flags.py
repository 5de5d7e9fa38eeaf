"""tests/tools/extract_vllm_flags.py on a small tree written in vLLM 0.21.0's own patterns (the wheel
itself is too large to keep): choices from a Literal alias imported from another module, "None" for an
optional one, no choices where `str` is also taken, where the name is bound only under TYPE_CHECKING,
or where add_cli_args rewrites the kwargs; int Literals as integers; sizes as human_int."""

from __future__ import annotations

import contextlib
import io
import textwrap
from pathlib import Path

import pytest

from tests.tools.extract_vllm_flags import main

TREE = {
    "vllm/_version.py": "__version__ = version = '0.21.0'\n__commit_id__ = commit_id = 'gad7125a43'\n",
    "vllm/config/__init__.py": "from vllm.config.cache import CacheConfig\nfrom vllm.config.model import ModelConfig\n",
    "vllm/config/cache.py": """
        from typing import Literal
        CacheDType = Literal["auto", "fp8"]
        Ranks = Literal[16, 8]
        @config
        class CacheConfig:
            cache_dtype: CacheDType = "auto"
            block_size: SkipValidation[int] = None
            rank: Ranks | None = None
            kv_cache_memory_bytes: int | None = None
            moe_backend: CacheDType = "auto"
        """,
    "vllm/config/model.py": """
        from typing import TYPE_CHECKING, Any, Literal
        from vllm.config.cache import CacheDType
        if TYPE_CHECKING:
            from vllm.quant import QuantizationMethods
        else:
            QuantizationMethods = Any
        TokenizerMode = Literal["auto", "slow"]
        @config
        class ModelConfig:
            dtype: CacheDType | None = None
            quantization: QuantizationMethods | str | None = None
            tokenizer_mode: TokenizerMode | str = "auto"
            sizes: list[int] | None = None
        """,
    "vllm/quant.py": 'QuantizationMethods = Literal["awq", "gptq"]\n',
    "vllm/engine/arg_utils.py": """
        from vllm.config import CacheConfig, ModelConfig
        class EngineArgs:
            @staticmethod
            def add_cli_args(parser):
                cache_kwargs = get_kwargs(CacheConfig)
                model_kwargs = get_kwargs(ModelConfig)
                parser.add_argument("--kv-cache-dtype", **cache_kwargs["cache_dtype"])
                parser.add_argument("--block-size", **{**cache_kwargs["block_size"], "default": None})
                parser.add_argument("--rank", **cache_kwargs["rank"])
                parser.add_argument("--kv-cache-memory-bytes", **cache_kwargs["kv_cache_memory_bytes"])
                moe_kwargs = cache_kwargs["moe_backend"]
                moe_kwargs["type"] = lambda s: s.lower()
                parser.add_argument("--moe-backend", **moe_kwargs)
                parser.add_argument("--dtype", **model_kwargs["dtype"])
                parser.add_argument("--quantization", "-q", **model_kwargs["quantization"])
                parser.add_argument("--tokenizer-mode", **model_kwargs["tokenizer_mode"])
                parser.add_argument("--sizes", **model_kwargs["sizes"])
                parser.add_argument("--backend", choices=["triton", "flashinfer"], default=None)
                return parser
        """,
    "vllm/entrypoints/openai/cli_args.py": """
        from typing import Literal
        @config
        class FrontendArgs:
            log_level: Literal["info", "debug"] = "info"
            port: int = 8000
        def make_arg_parser(parser):
            parser.add_argument("--headless", action="store_true")
            return parser
        """,
}


@pytest.fixture(scope="module")
def lines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("wheel")
    for name, text in TREE.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(Path(root))
    return {line.split()[0]: line for line in out.getvalue().splitlines() if not line.startswith("#")}


@pytest.mark.parametrize(("spelling", "line"), [
    ("--kv-cache-dtype", "--kv-cache-dtype str choices=auto,fp8"),
    ("--block-size", "--block-size int"),  # SkipValidation[int] is Annotated[int, ...]
    ("--rank", "--rank int choices=8,16,None"),
    ("--kv-cache-memory-bytes", "--kv-cache-memory-bytes human_int"),
    ("--moe-backend", "--moe-backend str"),  # its type rewritten: vLLM lowercases before the choice
    ("--dtype", "--dtype str choices=auto,fp8,None"),  # the alias imported from another module
    ("--quantization,-q", "--quantization,-q str"),  # Any at run time (TYPE_CHECKING), and str
    ("--tokenizer-mode", "--tokenizer-mode str"),  # Literal | str: a metavar, not choices
    ("--sizes", "--sizes int"),
    ("--backend", "--backend str choices=flashinfer,triton"),
    ("--log-level", "--log-level str choices=debug,info"),
    ("--port", "--port int"),
    ("--headless", "--headless flag"),
])
def test_each_option_kind_and_choices_as_vllms_parser_makes_them(lines: dict[str, str], spelling: str,
                                                                  line: str) -> None:
    assert lines[spelling] == line
