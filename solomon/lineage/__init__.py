"""The proof of what answers, from the traffic end back to the corpus: the walk from a live server (``server``) or
an export (``export``) through the registry, manifest and run to the weights and corpus, and the answers check
that challenges any server against a run's verified weights (``answers``)."""
