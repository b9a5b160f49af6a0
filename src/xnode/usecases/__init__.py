"""Use cases between the API and the store: publishing, querying, subscribing, live delivery."""
