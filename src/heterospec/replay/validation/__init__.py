"""The simulator checked against real runs: the collect runs, replayed with the ``measured`` profile
(:mod:`.against_collect`); the serving run, replayed by the load replay (:mod:`.against_serving`); how much of an
error is the machine's (:mod:`.noise`) and the quantile estimators both sides share (:mod:`.quantiles`)."""
