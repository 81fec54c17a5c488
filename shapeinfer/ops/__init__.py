"""Shape rules, one module per family; importing this package fills the rule tables."""

from . import (creation, einops_rules, elementwise, fft, indexing, layout, modules, nn_functional,  # noqa: F401
               recurrent, reductions)
from .registry import FUNCTION_RULES, METHOD_RULES, MODULE_RULES, module_rule, op  # noqa: F401
