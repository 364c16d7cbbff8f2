"""The staleness penalty: steps to a target reward as staleness grows, and the forms it may take."""
