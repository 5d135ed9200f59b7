"""The replay stage (:mod:`.stage`): every imported trace set replayed on every system x schedule x latency
profile, in this process or over worker processes (:mod:`.simulate`), on the group entries the run names
(:mod:`.entries`), beside the artifact's own formulas."""
