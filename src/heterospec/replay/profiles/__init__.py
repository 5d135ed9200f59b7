"""Latency profiles: how long each model call takes. :mod:`.registry` names them (``get_profile``); the
implementations are the artifact's fitted formulas (:mod:`.paper`), datasheet rooflines (:mod:`.roofline`, from the
model shapes of :mod:`.role_shapes`), the HLS performance model (:mod:`.hls`) and robust fits on measured calls
(:mod:`.measured`); :mod:`.batch_prices` holds measured prices of batched calls and :mod:`.price_sweep` measures
them."""
