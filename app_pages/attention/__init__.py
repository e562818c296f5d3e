"""The Attention page: every head's weights, summaries, ablation, comparison and the query·key view."""
