// A core header that reaches up into the collectives: check-layering.py must refuse it.
#pragma once
#include "collectives/bcast.h"
