"""The traffic sample: peeking topics into Parquet, its row layout, manifest, footers and location."""
