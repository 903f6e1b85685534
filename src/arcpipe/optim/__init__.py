"""AdamATan2, sparse SignSGD for puzzle embeddings, Muon and EMA."""
