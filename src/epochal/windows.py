"""Windows: the definitions `KeyedStream.window` and `KeyedStream.windows` take, and triggers.

```python
from epochal.windows import Tumbling, Sliding, Session, EventTimeTrigger, CountTrigger
keyed.window(Sliding(size=60.0, slide=10.0)).allowed_lateness(30.0).count()
keyed.window(Tumbling(60), trigger=EventTimeTrigger().with_early_firings(every=1.0)).sum("amount")
keyed.window(Tumbling(10), time="processing").count()
keyed.count_window(100, slide=10).max("price")
```
"""

from .api.functions import ProcessWindowFunction as ProcessWindowFunction
from .api.windows import WindowedStream as WindowedStream
from .api.windows import WindowResults as WindowResults
from .plan.triggers import CountTrigger as CountTrigger
from .plan.triggers import EventTimeTrigger as EventTimeTrigger
from .plan.triggers import ProcessingTimeTrigger as ProcessingTimeTrigger
from .plan.triggers import PurgingTrigger as PurgingTrigger
from .plan.triggers import Trigger as Trigger
from .plan.windows import DeterministicWindow as DeterministicWindow
from .plan.windows import Session as Session
from .plan.windows import Sliding as Sliding
from .plan.windows import Tumbling as Tumbling
from .plan.windows import Window as Window

__all__ = [
    "CountTrigger",
    "DeterministicWindow",
    "EventTimeTrigger",
    "ProcessingTimeTrigger",
    "PurgingTrigger",
    "Trigger",
    "ProcessWindowFunction",
    "Session",
    "Sliding",
    "Tumbling",
    "Window",
    "WindowResults",
    "WindowedStream",
]
