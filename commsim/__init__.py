"""commsim: predict, measure and explain the communication cost of data-parallel training.

Data flows one way: calibrate -> profile JSON -> cost model -> simulator -> analysis.  This core
package imports neither torch nor matplotlib; the commands that need them import them lazily.
"""
__version__ = "0.1.0"
