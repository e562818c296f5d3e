"""Reading the model: attention beside attribution, and how faithful each is (no UI; imports model/)."""
