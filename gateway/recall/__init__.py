"""Recall: ranking trusted entries for a question (`search`, `vocabulary`;
the optional semantic stage `semantic`, the two rankings `stages` and their
`fusion`), the recall record and `recall_used` (`service`), and the figures
of the Learning panel (`learning`)."""
