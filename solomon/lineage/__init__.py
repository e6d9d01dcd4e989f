"""The proof of what answers, from the traffic end back to the corpus: the walk from a live server or an export
through the registry, manifest and run to the weights and corpus (``chain``), and the answers check that challenges
any server against a run's verified weights (``challenge``, comparing as ``answers`` says, over ``client``)."""
