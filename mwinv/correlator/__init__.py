"""Correlator: attribution, model, classification, advice and the report (parts meet at capture tables)."""
