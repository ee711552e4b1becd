"""The chat format at the token level: Harmony messages and prompts, tokenizers, the verifier's row layout."""
