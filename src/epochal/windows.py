"""Event-time windows: the definitions `KeyedStream.window` and `KeyedStream.windows` take.

```python
from epochal.windows import Tumbling, Sliding, Session
keyed.window(Sliding(size=60.0, slide=10.0)).allowed_lateness(30.0).count()
```
"""

from .api.functions import ProcessWindowFunction as ProcessWindowFunction
from .api.windows import WindowedStream as WindowedStream
from .api.windows import WindowResults as WindowResults
from .plan.windows import DeterministicWindow as DeterministicWindow
from .plan.windows import Session as Session
from .plan.windows import Sliding as Sliding
from .plan.windows import Tumbling as Tumbling
from .plan.windows import Window as Window

__all__ = [
    "DeterministicWindow",
    "ProcessWindowFunction",
    "Session",
    "Sliding",
    "Tumbling",
    "Window",
    "WindowResults",
    "WindowedStream",
]
