"""The telecom domain's task functions: the set-up calls a task's initialisation makes and the assertions its
``env_assertions`` score with, on the phone (upstream ``user_tools.py``'s non-tool functions) and on the
carrier's database (upstream ``tools.py``'s); wording is our own.

:class:`CarrierTaskFunctions` is a mixin of :class:`~eval.harnesses.tau2_telecom.TelecomTools`: it uses that
class's lookups (``_line``, ``_owned_line``, ``_plan``, ``_bill``, ``_customer``) and ``self.db``.

A mixin of :class:`~eval.harnesses.tau2_telecom_user.PhoneTools`, kept apart from the customer's 30 tools:
it reads the phone (``self.phone``, ``self.around``) and calls the simulation (``simulate_network_search``,
``mobile_data_working``, ``speed``, ``mms_works``) and two tools (``connect_vpn``, ``_set_permission``) of
that class.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from eval.harnesses.tau2_domain import ToolCallError
from eval.harnesses.tau2_telecom_db import TODAY, Bill, LineItem


class PhoneTaskFunctions:
    """Set-up functions (``SETUP``) and assertions (``ASSERTIONS``) of the telecom customer's phone."""

    phone: Any
    around: Any

    # ---- set-up functions (task initialisation) ----------------------------------------------------------
    def set_user_info(self, name: str, phone_number: str) -> None:
        self.around.name, self.around.phone_number = name, phone_number

    def set_user_location(self, abroad: bool) -> None:
        self.around.is_abroad = abroad

    def _toggle_until(self, flag: str, toggle: str, value: bool) -> None:
        if getattr(self.phone, flag) != value:
            getattr(self, toggle)()

    def turn_airplane_mode_on(self) -> None:
        self._toggle_until("airplane_mode", "toggle_airplane_mode", True)

    def turn_airplane_mode_off(self) -> None:
        self._toggle_until("airplane_mode", "toggle_airplane_mode", False)

    def unseat_sim_card(self) -> None:
        self.phone.sim_card_missing = True
        self.simulate_network_search()

    def lock_sim_card(self, mode: str) -> None:
        self.phone.sim_card_status = {"pin": "locked_pin", "puk": "locked_puk"}[mode]
        self.simulate_network_search()

    def turn_data_on(self) -> None:
        self.phone.data_enabled = True  # no network search, as upstream

    def turn_data_off(self) -> None:
        self._toggle_until("data_enabled", "toggle_data", False)

    def turn_roaming_on(self) -> None:
        self._toggle_until("roaming_enabled", "toggle_roaming", True)

    def turn_roaming_off(self) -> None:
        self._toggle_until("roaming_enabled", "toggle_roaming", False)

    def turn_data_saver_mode_on(self) -> None:
        self.phone.data_saver_mode = True

    def turn_data_saver_mode_off(self) -> None:
        self.phone.data_saver_mode = False

    def break_apn_settings(self) -> None:
        self.phone.active_apn_settings.apn_name = "broken"
        self.simulate_network_search()

    def break_apn_mms_setting(self) -> None:
        self.phone.active_apn_settings.mmsc_url = None

    def break_vpn(self) -> None:
        self.connect_vpn()
        if self.phone.vpn_details is not None:
            self.phone.vpn_details.server_performance = "poor"

    def remove_app_permission(self, app_name: str, permission: str) -> None:
        error = self._set_permission(app_name, permission, False)
        if error:
            raise ValueError(error)

    def set_wifi_calling(self, enabled: bool, mms_over_wifi: bool | None = None) -> None:
        self.phone.wifi_calling_enabled = enabled
        if mms_over_wifi is not None:
            self.phone.wifi_calling_mms_over_wifi = mms_over_wifi

    # ---- assertions (scoring) ----------------------------------------------------------------------------
    def assert_airplane_mode_status(self, expected_status: bool) -> bool:
        return self.phone.airplane_mode == expected_status

    def assert_service_status(self, expected_status: str) -> bool:
        return self.phone.network_connection_status == expected_status

    def assert_mobile_data_status(self, expected_status: bool) -> bool:
        return self.mobile_data_working() == expected_status

    def assert_mobile_roaming_status(self, expected_status: bool) -> bool:
        return self.phone.roaming_enabled == expected_status

    def assert_mobile_data_saver_mode_status(self, expected_status: bool) -> bool:
        return self.phone.data_saver_mode == expected_status

    def assert_internet_speed(self, expected_speed: float, expected_desc: str | None = None) -> bool:
        mbps, desc = self.speed()
        fast = (mbps or 0.0) >= expected_speed
        return fast if expected_desc is None else fast and desc.lower() == expected_desc.lower()

    def assert_internet_not_excellent(self) -> bool:
        return self.speed()[1].lower() != "excellent"

    def assert_can_send_mms(self, expected_status: bool) -> bool:
        return self.mms_works() == expected_status

    def assert_mobile_data_usage_exceeded(self, expected_status: bool) -> bool:
        return self.around.mobile_data_usage_exceeded == expected_status


class CarrierTaskFunctions:
    """Set-up functions (``SETUP``) and assertions (``ASSERTIONS``) on the carrier's database."""

    db: Any
    _line: Any
    _owned_line: Any
    _plan: Any
    _bill: Any
    _customer: Any

    def set_data_usage(self, customer_id: str, line_id: str, data_used_gb: float) -> str:
        self._owned_line(customer_id, line_id).data_used_gb = data_used_gb
        return f"Data usage of line {line_id} set to {data_used_gb} GB."

    def suspend_line_for_overdue_bill(
        self, customer_id: str, line_id: str, new_bill_id: str, contract_ended: bool
    ) -> str:
        """Open an overdue bill of one month's plan price and suspend the line (a task's starting state)."""
        line = self._line(line_id)
        if line.status != "Active":
            raise ToolCallError("Line must be active to suspend for unpaid bill")
        amount = self._plan(line.plan_id).price_per_month
        customer = self._customer(customer_id)
        if any(b.status == "Overdue" for b in map(self._bill, customer.bill_ids)):
            raise ToolCallError("Customer already has an overdue bill")
        last_end = TODAY.replace(day=1) - timedelta(days=1)
        start = last_end.replace(day=1)
        item = LineItem(
            description=f"Charge for line {line.line_id}", amount=amount, date=TODAY, item_type="Charge"
        )
        self.db.bills.append(
            Bill(
                bill_id=new_bill_id,
                customer_id=customer_id,
                period_start=start,
                period_end=last_end,
                issue_date=start,
                total_due=amount,
                due_date=start + timedelta(days=14),
                line_items=[item],
                status="Overdue",
            )  # fmt: skip
        )
        customer.bill_ids.append(new_bill_id)
        line.status, line.suspension_start_date = "Suspended", TODAY
        if contract_ended:
            line.contract_end_date = last_end
        return f"Line {line_id} suspended for the unpaid bill {new_bill_id}."

    def assert_data_refueling_amount(self, customer_id: str, line_id: str, expected_amount: float) -> bool:
        return abs(self._owned_line(customer_id, line_id).data_refueling_gb - expected_amount) < 1e-6

    def assert_line_status(self, customer_id: str, line_id: str, expected_status: str) -> bool:
        return self._owned_line(customer_id, line_id).status == expected_status

    def assert_overdue_bill_exists(self, customer_id: str, overdue_bill_id: str) -> bool:
        customer = self._customer(customer_id)
        return overdue_bill_id in customer.bill_ids and self._bill(overdue_bill_id).status == "Overdue"

    def assert_no_overdue_bill(self, overdue_bill_id: str) -> bool:
        bill = next((b for b in self.db.bills if b.bill_id == overdue_bill_id), None)
        return bill is None or bill.status == "Paid"
