"""What a run measured, and how it is reported: :mod:`.harness` runs every method (the baselines, the
oracles, the trained policy, the agentic loop) on the test split; :mod:`.selection_check` scores tool
selection on questions nobody trained on (the transfer check); :mod:`.report` writes report.md and the
plots, with :mod:`.phases`' table of where the run's time went; :mod:`.tables` writes the README's and
docs' result tables from recorded runs."""
