"""In-container code of the learners: the run wrapper and the checkpoint library (stdlib only)."""
