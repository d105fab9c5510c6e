"""The S3 archive (DESIGN §9): the archive sink service, its reader, replay, audit and export."""

from convdb.consumers.archive.service import ArchiveConsumer

__all__ = ["ArchiveConsumer"]
