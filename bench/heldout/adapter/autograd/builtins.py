"""autograd.builtins: autograd needs its own differentiable containers; gradjit's tracers
sit in plain Python ones, so these are Python's builtins."""
import builtins as _b

isinstance = _b.isinstance
type = _b.type
tuple = _b.tuple
list = _b.list
dict = _b.dict
