"""The shop project with no DATABASES at all (Django's dummy backend)."""
from settings import *

DATABASES: dict = {}
