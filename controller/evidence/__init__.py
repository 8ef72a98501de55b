"""The effect model and per-prefix trials: model.py (pure estimators), trial.py (the switchback
schedule and the rule that ends a trial), settings.py (EvidenceSettings) and load.py (stored
samples and decisions).  Imports nothing above the store."""
