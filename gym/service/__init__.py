"""The sandbox service over HTTP (`python -m gym sandbox-serve`): routes, admission, grade requests."""
