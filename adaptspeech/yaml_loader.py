"""YAML for configs and command-line overrides, read with YAML 1.2's core-schema rules.

PyYAML implements YAML 1.1, where ``3e-4`` is a *string* (1.1 floats need a dot) and ``no`` / ``off`` / ``yes``
are booleans. Both surprise users of training configs (``learning_rate: 3e-4``, ``eval_strategy: no``), so
:class:`ConfigLoader` resolves floats the 1.2 way (``3e-4``, ``1E5``, ``.5``, ``inf``, ``nan``) and only
``true`` / ``false`` (any case) as booleans.
"""

from __future__ import annotations

import re
from typing import Any

import yaml


class ConfigLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with YAML 1.2 core-schema booleans and floats."""


def _drop_resolvers(loader: type[yaml.SafeLoader], tag: str) -> None:
    loader.yaml_implicit_resolvers = {
        first: [(t, regexp) for t, regexp in resolvers if t != tag]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }


_drop_resolvers(ConfigLoader, "tag:yaml.org,2002:bool")
ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.VERBOSE,
    ),
    list("-+0123456789."),
)


def load(text: str) -> Any:
    """Parse YAML text with :class:`ConfigLoader`."""
    return yaml.load(text, Loader=ConfigLoader)
