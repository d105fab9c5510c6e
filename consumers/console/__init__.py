"""The web console `convdb serve` shows at `/`: conversations, timeline, effects, the human queue, live.

Server-rendered (Jinja2, autoescaped) with one small script for live updates; templates and
assets are package data, so nothing is built at install time and nothing comes from a CDN.
Tenancy is the API's: a session cookie stands for an API key, and every read goes through the
API's own query functions.
"""

from fastapi import APIRouter

from convdb.consumers.console import actions, history, live, pages

router = APIRouter(include_in_schema=False)
router.include_router(pages.router)
router.include_router(actions.router)
router.include_router(history.router)
router.include_router(live.router)

__all__ = ["router"]
