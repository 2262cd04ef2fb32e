"""The shop example's Django project package: settings, URLs and the queue accessors."""
