"""harness/judge: the LLM judge's clients, cache, counts and retries."""
