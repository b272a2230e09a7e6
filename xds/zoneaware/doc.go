// Package zoneaware computes zone-aware locality weights for one service.
package zoneaware
