"""MagicPIG's defaults, held once.

The entry points (``use_attention``, ``generate``, the estimators' constructors, the study, the
CLI) default to these values through :data:`DEFAULTS`; the functions below them take K and L from
their caller, with no default of their own. Change a value here and every entry point follows.
A :class:`MagicPIGConfig` also carries a choice of them as one value:
``use_attention(model, "magicpig", **MagicPIGConfig(K=12, L=300).options())``."""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["MagicPIGConfig", "DEFAULTS"]

# Most bits per table: bucket ids are packed into int64 with the top bit clear.
_MAX_K = 62


@dataclass(frozen=True)
class MagicPIGConfig:
    """MagicPIG's settings: the authors' defaults unless given.

    Parameters
    ----------
    K : int in [1, 62]
        Bits per table (bucket ids are packed into int64 with the top bit clear).
    L : int >= 1
        Tables.
    min_hits : int in [1, L]
        A key is sampled when it shares the query's bucket in at least this many tables.
    sinks : int >= 0
        The first tokens, always read exactly.
    recent : int >= 0
        The last tokens (the window), always read exactly.
    seed : int >= 0
        Seed of the random hyperplanes.
    buffer : int >= 1
        Tokens written after the tables were built are read exactly from a buffer of this many
        before they are hashed in.

    Raises
    ------
    TypeError
        A setting that is not an int (a bool included).
    ValueError
        A setting outside its range above.
    """

    K: int = 10
    L: int = 150
    min_hits: int = 2
    sinks: int = 4
    recent: int = 64
    seed: int = 0
    buffer: int = 256

    def __post_init__(self):
        for name, lo, hi in (
            ("K", 1, _MAX_K),
            ("L", 1, None),
            ("min_hits", 1, None),
            ("sinks", 0, None),
            ("recent", 0, None),
            ("seed", 0, None),
            ("buffer", 1, None),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            if value < lo or (hi is not None and value > hi):
                allowed = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
                raise ValueError(f"{name} must be {allowed}, got {value}")
        if self.min_hits > self.L:
            raise ValueError(f"min_hits must be at most L = {self.L}, got {self.min_hits}")

    def options(self) -> dict:
        """The settings as keyword arguments (``use_attention``, ``generate``, ``build_index``).

        Returns
        -------
        dict
            Setting name -> value, one entry per field.
        """
        return asdict(self)


DEFAULTS = MagicPIGConfig()
