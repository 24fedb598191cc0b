//! What the stress tool expects of the system under test, written from the
//! contract: the ledger of every byte it created and the findings of the
//! run ([`ledger`]), and its own account of the quotas ([`quota`]).

pub mod ledger;
pub mod quota;
