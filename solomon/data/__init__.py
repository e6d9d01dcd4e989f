"""The data floor: the corpus, the tokenizer and the data card."""
