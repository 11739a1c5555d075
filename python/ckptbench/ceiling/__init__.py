"""Raw endpoint ceilings: what the endpoint itself carries, with no client library in the way.

``pool`` (N threads, one keep-alive http.client connection each; shared with the range-read
benchmark's raw GET ceiling), ``upload`` (the parallel-upload ceiling the save phase reports),
``download`` (the parallel ranged-GET ceiling the load tables report).
"""

from ckptbench.ceiling.download import DownloadCeiling, measure_download_ceiling
from ckptbench.ceiling.upload import UploadCeiling, measure_upload_ceiling

__all__ = [
    "DownloadCeiling",
    "UploadCeiling",
    "measure_download_ceiling",
    "measure_upload_ceiling",
]
