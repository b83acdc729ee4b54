"""The primitive steps a fault decision is made of; the addon knows how to perform each one."""

from __future__ import annotations

from dataclasses import dataclass

from kube_fault_proxy.proxy.requests.status import Reply
from kube_fault_proxy.proxy.requests.watch import EventEditor


@dataclass(frozen=True, slots=True)
class Respond:
    """Answer the client with this reply (upstream untouched when it comes before forwarding)."""

    reply: Reply


@dataclass(frozen=True, slots=True)
class ResetStream:
    """Reset the HTTP/2 stream, or close the HTTP/1 connection."""


@dataclass(frozen=True, slots=True)
class Wait:
    """Hold the request; with until_client_gone the wait ends early when the client leaves."""

    seconds: float
    until_client_gone: bool = False


@dataclass(frozen=True, slots=True)
class LimitWatch:
    """Ask the apiserver itself to end this watch after `seconds` (its timeoutSeconds)."""

    seconds: int


@dataclass(frozen=True, slots=True)
class EditEvents:
    """Edit this watch's events as they stream; the editor is this stream's own state."""

    editor: EventEditor


@dataclass(frozen=True, slots=True)
class CloseUpstream:
    """Drop the client's apiserver connection: every stream on it fails at once."""


@dataclass(frozen=True, slots=True)
class StartOutage:
    """The apiserver vanishes for `seconds`: live connections close, new ones are refused."""

    seconds: float
    refuse: str


@dataclass(frozen=True, slots=True)
class ServeStale:
    """Forward the LIST (or the GET, as a LIST of that one object) at a past revision of the apiserver:
    the one seen `lag_seconds` ago, or `lag_writes` writes of the resource ago."""

    lag_seconds: float | None = None
    lag_writes: int | None = None

    def describe(self) -> str:
        """How far back, for the journal."""
        if self.lag_writes is not None:
            return f"serve from the revision {self.lag_writes} writes back"
        return f"serve from the revision seen {self.lag_seconds:g}s ago"


@dataclass(frozen=True, slots=True)
class PinView:
    """Serve the read from the view its client connection is pinned to: a lag (a `ServeStale`), or None for the
    apiserver's current state; `asked` is each view's lag as written, for the journal."""

    views: tuple[ServeStale | None, ServeStale | None]
    asked: tuple[dict[str, float | int], dict[str, float | int]]

    def describe(self) -> str:
        """Both views, for the journal."""
        return "serve the connection's view: " + " or ".join(
            "the current state" if v is None else v.describe().removeprefix("serve ") for v in self.views)


@dataclass(frozen=True, slots=True)
class HoldAnswer:
    """Hold the apiserver's (committed) answer for `seconds`, then relay it; dropped if the client is gone. `kill`:
    the components a crash point names, each with its restart delay (journaled for the rig; empty: its default)."""

    seconds: float
    kill: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class CommitLater:
    """Send this request to the apiserver `seconds` from now, from the proxy itself, and journal its answer
    (whatever the client gets meanwhile)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class StallAnswer:
    """Stop sending this watch's answer after `after_events` events or `after_seconds`, for `seconds` (no byte, no
    end, no error; what the apiserver sends meanwhile is withheld), then end it cleanly."""

    seconds: float
    after_events: int | None = None
    after_seconds: float | None = None

    def describe(self) -> str:
        """When and how long, for the journal."""
        when = (f"after {self.after_events} events" if self.after_events is not None
                else f"after {self.after_seconds:g}s")
        return f"stall the stream {when} for {self.seconds:g}s, then end it"


@dataclass(frozen=True, slots=True)
class StallClient:
    """The client's whole connection stops answering for `seconds`: nothing read from it, nothing sent to it
    (HTTP/2 PINGs unanswered); then it heals, or ends when the client closes it."""

    seconds: float


Step = (Respond | ResetStream | Wait | LimitWatch | EditEvents | CloseUpstream | StartOutage | ServeStale | PinView
        | HoldAnswer | CommitLater | StallAnswer | StallClient)


@dataclass(frozen=True, slots=True)
class Plan:
    """Steps before forwarding, and steps after the upstream answered (commit-then-fail)."""

    before: tuple[Step, ...] = ()
    after: tuple[Step, ...] = ()
    after_only_if_committed: bool = False  # commit-then-fail: a non-2xx answer committed nothing
    refund_if_not_committed: bool = False  # crash point: a non-2xx answer gives the rule its turn back

    @property
    def forwards(self) -> bool:
        """Whether the request still reaches the apiserver."""
        return not any(isinstance(s, Respond | ResetStream | CloseUpstream | StartOutage) for s in self.before)

    @property
    def journaled_when_served(self) -> bool:
        """Whether the addon that serves the decision journals it, once it knows what it served (a stale view's
        revision is chosen as the request leaves), rather than the fault addon as it decides."""
        return any(isinstance(s, ServeStale | PinView) for s in self.before)

    def describe(self) -> str:
        """A short human reading of the plan, for the journal."""
        def one(step: Step) -> str:
            match step:
                case Respond(reply):
                    return f"respond {reply.status}"
                case ResetStream():
                    return "reset"
                case Wait(seconds, until_gone):
                    return f"wait {seconds:.3f}s" + (" or until client leaves" if until_gone else "")
                case LimitWatch(seconds):
                    return f"limit watch to {seconds}s"
                case EditEvents(editor):
                    return editor.describe()
                case CloseUpstream():
                    return "close the upstream connection"
                case StartOutage(seconds, refuse):
                    return f"outage {seconds:g}s ({refuse} new connections)"
                case ServeStale() | PinView():
                    return step.describe()
                case HoldAnswer(seconds, kill):
                    return f"hold the committed answer {seconds:g}s" + (
                        f" (kill {', '.join(c for c, _ in kill)})" if kill else "")
                case CommitLater(seconds):
                    return f"send the write upstream in {seconds:g}s"
                case StallAnswer():
                    return step.describe()
                case StallClient(seconds):
                    return f"stall the client's connection for {seconds:g}s"
            raise AssertionError(step)

        parts = [one(s) for s in self.before]
        if self.forwards:
            parts.append("forward")
        parts += [one(s) for s in self.after]
        return ", then ".join(parts)
