"""The HeteroReason artifact: its per-problem JSON traces imported into tables (:mod:`.importer`), its events as
the simulator's steps (:mod:`.event_steps`), its own closed-form replays (:mod:`.replays`) and its Figure 8 tables
regenerated (:mod:`.figure8`)."""
