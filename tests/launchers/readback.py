"""The readers of launcher files live in the package (`autoplace.export.readback`, also behind
`estimate --from`); the tests import them from here."""

from autoplace.export.readback import *  # noqa: F401,F403
from autoplace.export.readback import (  # noqa: F401
    KEYS,
    as_cli_strings,
    compare,
    expected,
    flatten,
    normal_recompute,
    overrides_dict,
    parse_flags,
)
