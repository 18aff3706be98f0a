"""No models: the queue's tables belong to the queue's schema, not to the ORM.

The module exists so that Django sends this app the post_migrate signal (it only does for apps with a
models module), on which every `manage.py migrate` brings the queue up to date (apps.py).
"""
