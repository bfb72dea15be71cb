"""parcel: an RQ app for sturdy.workers' tests."""
