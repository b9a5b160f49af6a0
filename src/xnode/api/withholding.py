"""HoldingsApi (xnode.withholding.v1): this originator's signed account of a range of its own
log (xnode.usecases.holdings). Translates protobuf and statuses only: a range still being
repaired is UNAVAILABLE (retry later)."""

from __future__ import annotations

from typing import Any

import grpc

from xnode.api.errors import StoreErrors, abort_rejected, abort_store
from xnode.api.service import ANSWER_CUT_TRAILER
from xnode.core.errors import Rejected
from xnode.core.withholding import Healing
from xnode.observability.outage import DatabaseOutage
from xnode.usecases.holdings import Holdings
from xnode_api.withholding.v1 import withholding_pb2 as pb
from xnode_api.withholding.v1 import withholding_pb2_grpc

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["HoldingsApi"].full_name

Context = grpc.aio.ServicerContext[Any, Any]


class HoldingsService(withholding_pb2_grpc.HoldingsApiServicer):
    def __init__(self, holdings: Holdings, outage: DatabaseOutage) -> None:
        self._holdings = holdings
        self._outage = outage

    async def GetSignedHoldings(
        self, request: pb.GetSignedHoldingsRequest, context: Context
    ) -> pb.GetSignedHoldingsResponse:
        try:
            question = request.question if request.HasField("question") else None
            signed, cut = await self._holdings.signed(
                request.originator_node_id, request.first, request.last, question
            )
        except Rejected as exc:
            await abort_rejected(context, exc, "holdings", "GetSignedHoldings")
            raise
        except Healing as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"{exc}; retry later")
        except StoreErrors as exc:
            await abort_store(context, "holdings", "GetSignedHoldings", exc, self._outage)
            raise
        if cut:  # the account's own `last` says how far it goes
            context.set_trailing_metadata(((ANSWER_CUT_TRAILER, "bytes"),))
        return pb.GetSignedHoldingsResponse(holdings=signed)


def add_holdings_service(service: HoldingsService, server: grpc.aio.Server) -> None:
    withholding_pb2_grpc.add_HoldingsApiServicer_to_server(service, server)
