"""Recall: ranking trusted entries for a question (`search`, `vocabulary`,
the optional `embeddings`), the recall record and `recall_used` (`service`),
and the figures of the Learning panel (`learning`)."""
