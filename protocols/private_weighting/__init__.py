"""The Private Weighting Protocol of ULDP-AVG-w (Kato et al., VLDB 2024, Protocol 1): the protocol's description and
shared pieces in :mod:`~privsilo.protocols.private_weighting.protocol`, slot sizes and bounds in ``layout``, messages in
``messages``, the parties in ``silo`` (``PwpSilo``) and ``server`` (``PwpServer``), the silo's table look-ups in
``tables``."""
from privsilo.protocols.private_weighting.protocol import PwpConfig, PwpStage, encode_noise
from privsilo.protocols.private_weighting.server import PwpServer
from privsilo.protocols.private_weighting.silo import PwpSilo

__all__ = ["PwpConfig", "PwpServer", "PwpSilo", "PwpStage", "encode_noise"]
