"""The GPT decoder, its chunked output loss, its weights on disk and sampling from it."""
