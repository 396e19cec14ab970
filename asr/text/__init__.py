"""Text: the subword tokenizer whose ids are the CTC outputs (blank = 0)."""
