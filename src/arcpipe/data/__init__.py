"""ARC sources, augmentation, the dataset builder (upstream on-disk format) and its verification."""
